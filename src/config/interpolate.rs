//! `${VAR}` and `${file:/path}` interpolation into configuration strings.
//!
//! `${NAME}` is replaced by the value of environment variable `NAME`
//! (`[A-Za-z_][A-Za-z0-9_]*`); `$${` is written as a literal `${`; any other
//! `$` is kept as is. Values are inserted verbatim, never interpolated again.
//! An unset variable is an error: a silently empty password or broker list is
//! worse than a refusal to start.
//!
//! In secret keys ([`Files::Allowed`]) a variable set to the empty string is
//! an error, as an empty secret file is: a secret is never empty by accident.
//!
//! `${file:/run/secrets/pg_password}` is replaced by the content of that file
//! (the way Kubernetes and Docker mount secrets), in secret keys only
//! ([`Files::Allowed`]); elsewhere it is an error. Rules:
//! - the path must be absolute (a relative one would depend on the working
//!   directory of whoever starts walrelay); it ends at the first `}`;
//! - one trailing line ending (`\n` or `\r\n`) is removed, nothing else;
//! - a missing, unreadable, empty, non-UTF-8 or oversized (over
//!   [`MAX_SECRET_FILE_BYTES`]) file is an error that names the path and the
//!   cause, never the content;
//! - a file the group or others may read (by libpq's rule for key files:
//!   `0600`, or `0640` when root owns it, at most) is read, with a warning
//!   that names it and the `chmod` (a refusal would break the many mounts
//!   that are `0644` today).

use std::env::VarError;
use std::io::Read;
use std::path::Path;

use super::error::{MAX_VALUE_CHARS, shorten};
use super::validate::readable_by_others;

/// Looks up one environment variable; `std::env::var` in production.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Result<String, VarError>;

/// The largest secret file `${file:...}` reads (64 KiB): a password or key
/// is far smaller; the bound keeps a wrong path (a log, a device) out of memory.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 << 10;

/// Whether `${file:...}` may be used in the key being interpolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Files {
    /// A key that holds a secret (`postgres.password`, `postgres.sslpassword`,
    /// secret librdkafka properties): files are read, and an empty variable
    /// is refused as an empty file is.
    Allowed,
    /// Any other key: `${file:...}` is refused.
    Refused,
}

/// Why a string could not be interpolated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum InterpolateError {
    Unset {
        var: String,
    },
    NotUnicode {
        var: String,
    },
    /// A variable set to the empty string, in a secret key.
    EmptySecret {
        var: String,
    },
    Unterminated,
    InvalidName {
        name: String,
    },
    FileNotAllowed,
    FileRelative {
        path: String,
    },
    /// The file could not be read; `cause` is the OS error (never content).
    FileUnreadable {
        path: String,
        cause: String,
    },
    FileNotUnicode {
        path: String,
    },
    FileEmpty {
        path: String,
    },
    FileTooLarge {
        path: String,
    },
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
            InterpolateError::EmptySecret { var } => format!(
                "environment variable {} is set but empty; a secret cannot be empty (check \
                 what sets it, or remove the key)",
                short(var)
            ),
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
            InterpolateError::FileNotAllowed => {
                "\"${file:...}\" is allowed only in keys that hold secrets \
                 (postgres.password, postgres.sslpassword, kafka.sasl_password, \
                 kafka.ssl_key_password, column mask salts, secret [kafka.librdkafka] properties \
                 such as sasl.password); use ${NAME} (an environment variable) here"
                    .to_owned()
            }
            InterpolateError::FileRelative { path } => format!(
                "secret file path {} is relative; write an absolute path, e.g. \
                 ${{file:/run/secrets/pg_password}}",
                quote_path(path)
            ),
            InterpolateError::FileUnreadable { path, cause } => format!(
                "cannot read secret file {}: {cause}; mount the secret there (and make it \
                 readable by walrelay's user) or fix the path",
                quote_path(path)
            ),
            InterpolateError::FileNotUnicode { path } => {
                format!("secret file {} is not valid UTF-8 text", quote_path(path))
            }
            InterpolateError::FileEmpty { path } => format!(
                "secret file {} is empty; a secret cannot be empty (check what is mounted there)",
                quote_path(path)
            ),
            InterpolateError::FileTooLarge { path } => format!(
                "secret file {} is larger than {MAX_SECRET_FILE_BYTES} bytes; is it the right file?",
                quote_path(path)
            ),
        }
    }
}

fn quote_path(path: &str) -> String {
    format!("{:?}", shorten(path, MAX_VALUE_CHARS))
}

/// Interpolates `input` with `${file:...}` refused; `Ok(None)` when it
/// contains no `$` (nothing to do).
#[cfg(test)]
pub(crate) fn interpolate(
    input: &str,
    env: EnvLookup<'_>,
) -> Result<Option<String>, InterpolateError> {
    interpolate_with(input, env, Files::Refused, &mut Vec::new())
}

/// Interpolates `input`, reading `${file:...}` references when `files`
/// allows them; `Ok(None)` when it contains no `$`. Adds to `warnings` what
/// is worth saying but not refusing (a secret file others may read).
pub(crate) fn interpolate_with(
    input: &str,
    env: EnvLookup<'_>,
    files: Files,
    warnings: &mut Vec<String>,
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
            if let Some(path) = name.strip_prefix("file:") {
                if files == Files::Refused {
                    return Err(InterpolateError::FileNotAllowed);
                }
                out.push_str(&read_secret_file(path, warnings)?);
            } else if !is_var_name(name) {
                return Err(InterpolateError::InvalidName {
                    name: name.to_owned(),
                });
            } else {
                match env(name) {
                    Ok(value) if value.is_empty() && files == Files::Allowed => {
                        return Err(InterpolateError::EmptySecret {
                            var: name.to_owned(),
                        });
                    }
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

/// The content of secret file `path` without one trailing line ending; a
/// warning when the group or others may read it.
fn read_secret_file(path: &str, warnings: &mut Vec<String>) -> Result<String, InterpolateError> {
    let owned = || path.to_owned();
    if !Path::new(path).is_absolute() {
        return Err(InterpolateError::FileRelative { path: owned() });
    }
    // Checked before opening: opening a FIFO waits for a writer, forever
    // (and a device may never end).
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => {
            return Err(InterpolateError::FileUnreadable {
                path: owned(),
                cause: "not a regular file (a directory, a FIFO or a device); a secret must be a \
                        file"
                    .to_owned(),
            });
        }
        Ok(meta) => {
            if let Some(mode) = readable_by_others(&meta) {
                warnings.push(format!(
                    "secret file {} is readable by the group or by others (mode {mode:04o}); \
                     a secret should be readable by walrelay's user only: run chmod 600 {} \
                     (0640 is enough when root owns it, as with a Kubernetes Secret mounted \
                     with defaultMode: 0440)",
                    quote_path(path),
                    shorten(path, MAX_VALUE_CHARS)
                ));
            }
        }
        Err(_) => {}
    }
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_SECRET_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(|e| InterpolateError::FileUnreadable {
            path: owned(),
            cause: e.to_string(),
        })?;
    if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(InterpolateError::FileTooLarge { path: owned() });
    }
    let mut text =
        String::from_utf8(bytes).map_err(|_| InterpolateError::FileNotUnicode { path: owned() })?;
    if text.ends_with("\r\n") {
        text.truncate(text.len() - 2);
    } else if text.ends_with('\n') {
        text.truncate(text.len() - 1);
    }
    if text.is_empty() {
        return Err(InterpolateError::FileEmpty { path: owned() });
    }
    Ok(text)
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
