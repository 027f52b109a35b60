//! Backend message framing, pure: [`parse_frame`] checks a message's
//! declared length against the limit *before* buffering it, handles
//! CopyBothResponse (`'W'`, which `postgres_protocol` does not parse)
//! itself and hands every other message to `Message::parse`; it never
//! panics on short or hostile input.

use bytes::{Buf, BytesMut};
use postgres_protocol::message::backend::Message;

use super::error::WireError;

/// A backend message, or the CopyBothResponse that `postgres_protocol` lacks.
pub enum Backend {
    CopyBothResponse,
    Message(Message),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::CopyBothResponse => f.write_str("CopyBothResponse"),
            Backend::Message(m) => f.write_str(message_name(m)),
        }
    }
}

/// Frame parser shared by the connection and its tests: checks the size limit
/// before buffering, handles `'W'` itself and hands the rest to
/// `Message::parse`.
pub(super) fn parse_frame(buf: &mut BytesMut, max: usize) -> Result<Option<Backend>, WireError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len < 4 {
        return Err(WireError::Protocol(format!(
            "backend message {:?} declares length {len}, below the 4-byte minimum",
            tag as char
        )));
    }
    let total = len + 1;
    if total > max {
        return Err(WireError::MessageTooLarge {
            tag: tag as char,
            len: total,
            max,
        });
    }
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    if tag == b'W' {
        // CopyBothResponse: format i8, column count i16, formats i16 each.
        // We only need to know it arrived.
        buf.advance(total);
        return Ok(Some(Backend::CopyBothResponse));
    }
    match Message::parse(buf) {
        Ok(Some(msg)) => Ok(Some(Backend::Message(msg))),
        Ok(None) => Ok(None),
        Err(e) => Err(WireError::Protocol(format!(
            "cannot parse backend message {:?}: {e}",
            tag as char
        ))),
    }
}

pub(super) fn unexpected(context: &str, msg: &Backend) -> WireError {
    let name = match msg {
        Backend::CopyBothResponse => "CopyBothResponse",
        Backend::Message(m) => message_name(m),
    };
    WireError::Protocol(format!("unexpected {name} while {context}"))
}

pub(super) fn message_name(m: &Message) -> &'static str {
    match m {
        Message::AuthenticationOk => "AuthenticationOk",
        Message::CopyData(_) => "CopyData",
        Message::CopyDone => "CopyDone",
        Message::CommandComplete(_) => "CommandComplete",
        Message::DataRow(_) => "DataRow",
        Message::ErrorResponse(_) => "ErrorResponse",
        Message::ReadyForQuery(_) => "ReadyForQuery",
        Message::RowDescription(_) => "RowDescription",
        Message::CopyInResponse(_) => "CopyInResponse",
        Message::CopyOutResponse(_) => "CopyOutResponse",
        _ => "backend message",
    }
}

#[cfg(test)]
mod tests;
