//! A reply line's checksum: the agent seals each reply line it prints, the
//! client opens it before reading a byte of it, so a reply cut short or
//! changed on the way (a flipped byte in a cell's output, in a journal
//! number) is a transport error to retry, never a result.
//!
//! A sealed line is the envelope's JSON object with one more member at its
//! end, `"sum"`: 16 hex digits of the 64-bit FNV-1a hash of the object
//! without that member. It stays one JSON object, so a reader that ignores
//! the sum still reads the envelope. FNV-1a tells apart any two inputs of
//! the same length that differ in one byte (each step is a bijection of
//! the state), and a cut line has no closing `"}` where the sum ends.
//!
//! The install script (plain `sh`, before any agent is there) does not
//! seal its reply; [`super::parse_reply`] accepts an unsealed line for the
//! install op only.

/// What precedes the sum's hex digits.
const OPEN: &[u8] = b",\"sum\":\"";
/// What follows them.
const CLOSE: &[u8] = b"\"}";
/// Hex digits of the sum.
const DIGITS: usize = 16;

/// Why a line is not a sealed reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SealError {
    /// The line does not end with a sum (cut short, or not sealed).
    Missing,
    /// The sum does not match the line (changed on the way).
    Mismatch,
}

/// The 64-bit FNV-1a hash of `bytes`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Seals `object` (one JSON object with at least one member, `{…}`):
/// the line to print, with its sum and a newline. Anything else is
/// returned as a line unsealed (the reader then refuses it).
pub fn seal(object: &[u8]) -> Vec<u8> {
    let mut line = Vec::with_capacity(object.len() + OPEN.len() + DIGITS + CLOSE.len() + 1);
    match object.split_last() {
        Some((b'}', body)) if body.len() > 1 && body[0] == b'{' => {
            line.extend_from_slice(body);
            line.extend_from_slice(OPEN);
            line.extend_from_slice(format!("{:016x}", fnv1a(object)).as_bytes());
            line.extend_from_slice(CLOSE);
        }
        _ => line.extend_from_slice(object),
    }
    line.push(b'\n');
    line
}

/// Opens a sealed `line` (without its newline): the JSON object it
/// carries, without the sum, once the sum matches.
pub fn open(line: &[u8]) -> Result<Vec<u8>, SealError> {
    let tail = OPEN.len() + DIGITS + CLOSE.len();
    if line.len() < tail + 1 || !line.ends_with(CLOSE) {
        return Err(SealError::Missing);
    }
    let (body, suffix) = line.split_at(line.len() - tail);
    let (open, rest) = suffix.split_at(OPEN.len());
    let (hex, _) = rest.split_at(DIGITS);
    // Exactly the digits `seal` writes: `from_str_radix` alone also takes
    // a leading `+` and capitals, so a changed byte there went unseen.
    if !hex.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(SealError::Missing);
    }
    let hex = std::str::from_utf8(hex).map_err(|_| SealError::Missing)?;
    let sum = u64::from_str_radix(hex, 16).map_err(|_| SealError::Missing)?;
    if open != OPEN {
        return Err(SealError::Missing);
    }
    let mut object = body.to_vec();
    object.push(b'}');
    if fnv1a(&object) == sum {
        Ok(object)
    } else {
        Err(SealError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_sealed_object_opens_to_itself_and_stays_json() {
        for object in [
            &b"{\"v\":1,\"id\":3,\"reply\":\"acked\"}"[..],
            b"{\"a\":[]}",
        ] {
            let line = seal(object);
            assert_eq!(line.last(), Some(&b'\n'));
            let line = &line[..line.len() - 1];
            assert_eq!(open(line).unwrap(), object);
            let value: serde_json::Value = serde_json::from_slice(line).unwrap();
            assert!(value.get("sum").is_some());
        }
    }

    #[test]
    fn an_unsealed_or_cut_line_has_no_sum() {
        assert_eq!(open(b"{\"v\":1,\"id\":3}"), Err(SealError::Missing));
        assert_eq!(open(b""), Err(SealError::Missing));
        let line = seal(b"{\"v\":1}");
        for cut in 0..line.len() - 1 {
            assert!(open(&line[..cut]).is_err(), "cut at {cut}");
        }
    }

    proptest! {
        #[test]
        fn any_changed_byte_is_seen(pos in 0usize..200, flip in 1u8..=255) {
            let line = seal(b"{\"v\":1,\"id\":7,\"reply\":{\"waited\":{\"batch\":{\"entries\":[{\"n\":1,\"kind\":\"output\",\"stream\":\"stdout\",\"data\":{\"text\":\"hello\\n\"}}],\"done\":false}}}}");
            let mut line = line[..line.len() - 1].to_vec();
            let pos = pos % line.len();
            line[pos] ^= flip;
            prop_assert!(open(&line).is_err());
        }
    }
}
