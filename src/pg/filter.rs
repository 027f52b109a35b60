//! Operator-written row conditions (`republish --where`, `snapshot
//! --where`, a snapshot signal's `additional-conditions`), checked before
//! they are spliced into `COPY (SELECT … FROM t WHERE (<condition>) …)`.
//!
//! The condition is trusted SQL from an operator: it runs read-only (the
//! readers' transactions are `READ ONLY`) under a `statement_timeout`, and
//! may call any function the role may call. What it must not do is leave
//! its parentheses: `x) UNION SELECT … FROM other_table --` would publish
//! another table's rows as outbox events, and `x); …` would run a second
//! statement.
//!
//! Invariant: a condition [`check`] accepts is one parenthesized
//! expression's content under PostgreSQL's lexer with
//! `standard_conforming_strings = on` (the default since 9.1; walrelay's
//! readers set it): outside string literals and quoted identifiers its
//! parentheses never close more than they opened and end balanced, and it
//! has no `;`, no comment (`--`, `/*`) and no `$` (so no dollar quoting,
//! whose end this lexer would have to agree on). Strings are `'…'` (`''`
//! inside), `E'…'` (with backslash escapes) and quoted identifiers `"…"`
//! (`""` inside); anything unterminated is refused. So however the server
//! parses the expression, the `)` walrelay writes after it closes it.

/// Why `condition` cannot be used as a row condition, if it cannot.
pub fn check(condition: &str) -> Result<(), String> {
    let bytes = condition.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    let fix = "write one SQL condition on the table's columns, quoting strings with '…'";
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\'' => {
                // An E'…' string takes backslash escapes: E (or e) starting
                // a token, right before the quote.
                let escapes = i > 0
                    && matches!(bytes[i - 1], b'E' | b'e')
                    && (i < 2 || !is_identifier_byte(bytes[i - 2]));
                i = end_of_quoted(bytes, i, b'\'', escapes)
                    .ok_or_else(|| format!("a string literal is not closed; {fix}"))?;
            }
            b'"' => {
                i = end_of_quoted(bytes, i, b'"', false)
                    .ok_or_else(|| format!("a quoted identifier is not closed; {fix}"))?;
            }
            b'(' => {
                depth += 1;
                i += 1;
            }
            b')' => {
                depth = depth.checked_sub(1).ok_or_else(|| {
                    format!(
                        "a ')' closes more than the condition opened: it would end the \
                         condition and let the rest of the text run as SQL of its own; {fix}"
                    )
                })?;
                i += 1;
            }
            b';' => return Err(format!("';' would end the statement; {fix}")),
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                return Err(format!("comments ('--') are not allowed; {fix}"));
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                return Err(format!("comments ('/*') are not allowed; {fix}"));
            }
            b'$' => {
                return Err(format!(
                    "'$' is not allowed outside a string (no dollar quoting, no parameters); {fix}"
                ));
            }
            b'\\' => return Err(format!("'\\' is not allowed outside a string; {fix}")),
            0 => return Err(format!("a NUL byte is not allowed; {fix}")),
            _ => i += 1,
        }
    }
    if depth > 0 {
        return Err(format!("{depth} '(' not closed; {fix}"));
    }
    if condition.trim().is_empty() {
        return Err(format!("the condition is empty; {fix}"));
    }
    Ok(())
}

/// Bytes that continue an identifier or keyword (so an `E` before them is
/// not a string prefix).
fn is_identifier_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80
}

/// Index just past the quoted token opening at `start` (`quote` doubled
/// inside stands for itself; with `escapes`, a backslash takes the next
/// byte as is), or `None` when it is not closed.
fn end_of_quoted(bytes: &[u8], start: usize, quote: u8, escapes: bool) -> Option<usize> {
    let mut i = start + 1;
    loop {
        match *bytes.get(i)? {
            b'\\' if escapes => i += 2,
            b if b == quote => {
                if bytes.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return Some(i + 1);
                }
            }
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests;
