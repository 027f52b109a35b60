//! `${VAR}` interpolation of environment variables into configuration strings.
//!
//! `${NAME}` is replaced by the value of environment variable `NAME`
//! (`[A-Za-z_][A-Za-z0-9_]*`); `$${` is written as a literal `${`; any other
//! `$` is kept as is. Values are inserted verbatim, never interpolated again.
//! An unset variable is an error: a silently empty password or broker list is
//! worse than a refusal to start.

use std::env::VarError;

use super::error::{MAX_VALUE_CHARS, shorten};

/// Looks up one environment variable; `std::env::var` in production.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Result<String, VarError>;

/// Why a string could not be interpolated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InterpolateError {
    Unset { var: String },
    NotUnicode { var: String },
    Unterminated,
    InvalidName { name: String },
}

impl InterpolateError {
    /// The message for an operator. For secret keys the offending text is not
    /// repeated, since it may be part of a literal password.
    pub(crate) fn describe(&self, secret: bool) -> String {
        let short = |name: &str| shorten(name, MAX_VALUE_CHARS);
        match self {
            InterpolateError::Unset { var } => format!(
                "environment variable {} is not set; export it before starting walrelay \
                 (or write $${{ for a literal \"${{\")",
                short(var)
            ),
            InterpolateError::NotUnicode { var } => {
                format!(
                    "environment variable {} is set but is not valid UTF-8",
                    short(var)
                )
            }
            InterpolateError::Unterminated => {
                "\"${\" is not closed by \"}\"; write ${NAME}, or $${ for a literal \"${\""
                    .to_owned()
            }
            InterpolateError::InvalidName { name } if !secret => format!(
                "\"${{{}}}\" is not a valid variable reference; names use letters, digits \
                 and '_' and do not start with a digit (write $${{ for a literal \"${{\")",
                short(name)
            ),
            InterpolateError::InvalidName { .. } => {
                "contains a \"${...}\" reference with an invalid variable name; names use \
                 letters, digits and '_' and do not start with a digit (write $${ for a literal \
                 \"${\")"
                    .to_owned()
            }
        }
    }
}

/// Interpolates `input`; `Ok(None)` when it contains no `$` (nothing to do).
pub(crate) fn interpolate(
    input: &str,
    env: EnvLookup<'_>,
) -> Result<Option<String>, InterpolateError> {
    if !input.contains('$') {
        return Ok(None);
    }
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let tail = &rest[pos..];
        if let Some(after) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = after;
        } else if let Some(after) = tail.strip_prefix("${") {
            let end = after.find('}').ok_or(InterpolateError::Unterminated)?;
            let name = &after[..end];
            if !is_var_name(name) {
                return Err(InterpolateError::InvalidName {
                    name: name.to_owned(),
                });
            }
            match env(name) {
                Ok(value) => out.push_str(&value),
                Err(VarError::NotPresent) => {
                    return Err(InterpolateError::Unset {
                        var: name.to_owned(),
                    });
                }
                Err(VarError::NotUnicode(_)) => {
                    return Err(InterpolateError::NotUnicode {
                        var: name.to_owned(),
                    });
                }
            }
            rest = &after[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(Some(out))
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
