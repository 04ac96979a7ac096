//! The channel's framing, shared by the agent (`tether-agent channel`) and
//! the client's multiplexer: each frame is one ASCII header line
//! `KIND ID LEN\n` followed by exactly `LEN` payload bytes. The payload is
//! opaque here (a request envelope, a reply line): it is never re-parsed to
//! find its end, so any bytes pass, and a reply is matched to its request
//! by the frame id, which the multiplexer chose.

use std::fmt;

/// The largest payload either side accepts (a reply carries at most one
/// cell's capped journal batch; a request one cell's code).
pub const MAX_PAYLOAD: usize = 64 << 20;
/// A header line longer than this is garbage, not a slow header.
const MAX_HEADER: usize = 48;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FrameKind {
    /// Agent → client, once, first: the channel is up; the payload is the
    /// protocol version.
    Hello,
    /// Client → agent: one op envelope (what a one-shot op reads on stdin).
    Request,
    /// Agent → client: the reply line of the request with the same id.
    Reply,
    /// Agent → client, every [`super::HEARTBEAT`]: the agent is alive, so
    /// a silent channel is a stalled one. Its id counts the bytes the agent
    /// has received on this stream, so a client
    /// whose requests are lost on the way (a half-open path, a middlebox
    /// that drops bytes) can tell while the beats still come through.
    Beat,
}

impl FrameKind {
    fn letter(self) -> u8 {
        match self {
            FrameKind::Hello => b'H',
            FrameKind::Request => b'Q',
            FrameKind::Reply => b'R',
            FrameKind::Beat => b'B',
        }
    }

    fn from_letter(letter: &str) -> Option<FrameKind> {
        match letter {
            "H" => Some(FrameKind::Hello),
            "Q" => Some(FrameKind::Request),
            "R" => Some(FrameKind::Reply),
            "B" => Some(FrameKind::Beat),
            _ => None,
        }
    }
}

/// One frame.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    /// What it is.
    pub kind: FrameKind,
    /// The request it belongs to (0 for hello; for a beat, the bytes
    /// received).
    pub id: u64,
    /// Its bytes.
    pub payload: Vec<u8>,
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Frame")
            .field("kind", &self.kind)
            .field("id", &self.id)
            .field("payload", &String::from_utf8_lossy(&self.payload))
            .finish()
    }
}

impl Frame {
    /// A frame of `kind` for request `id`.
    pub fn new(kind: FrameKind, id: u64, payload: Vec<u8>) -> Frame {
        Frame { kind, id, payload }
    }

    /// The bytes on the wire.
    pub fn encode(&self) -> Vec<u8> {
        let header = format!(
            "{} {} {}\n",
            self.kind.letter() as char,
            self.id,
            self.payload.len()
        );
        let mut bytes = Vec::with_capacity(header.len() + self.payload.len());
        bytes.extend_from_slice(header.as_bytes());
        bytes.extend_from_slice(&self.payload);
        bytes
    }
}

/// Why a byte stream is not a channel's frames. The stream cannot be
/// resynchronised after one: the side that sees it closes the channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A header line that is not `KIND ID LEN`.
    BadHeader(String),
    /// A payload larger than [`MAX_PAYLOAD`].
    TooLarge(u64),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::BadHeader(h) => write!(
                f,
                "not a channel frame header (expected `KIND ID LEN`): {h:?}"
            ),
            FrameError::TooLarge(n) => write!(
                f,
                "a channel frame of {n} bytes is larger than the {MAX_PAYLOAD} allowed"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// Cuts frames out of a byte stream that arrives in pieces of any size.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    /// The parsed header of the frame whose payload is still arriving.
    header: Option<(FrameKind, u64, usize)>,
    /// Set once the stream was found broken: every later call says so.
    broken: Option<FrameError>,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Appends bytes received.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes received that are not yet part of a whole frame.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole frame, `None` until one has arrived.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        match self.step() {
            Err(e) => {
                self.broken = Some(e.clone());
                Err(e)
            }
            ok => ok,
        }
    }

    fn step(&mut self) -> Result<Option<Frame>, FrameError> {
        if self.header.is_none() {
            let Some(end) = self.buf.iter().position(|&b| b == b'\n') else {
                if self.buf.len() > MAX_HEADER {
                    let seen = String::from_utf8_lossy(&self.buf[..MAX_HEADER]).into_owned();
                    return Err(FrameError::BadHeader(seen));
                }
                return Ok(None);
            };
            let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
            self.header = Some(parse_header(&line)?);
            self.buf.drain(..=end);
        }
        let Some((kind, id, len)) = self.header else {
            return Ok(None);
        };
        if self.buf.len() < len {
            return Ok(None);
        }
        let rest = self.buf.split_off(len);
        let payload = std::mem::replace(&mut self.buf, rest);
        self.header = None;
        Ok(Some(Frame { kind, id, payload }))
    }
}

fn parse_header(line: &str) -> Result<(FrameKind, u64, usize), FrameError> {
    let bad = || FrameError::BadHeader(line.to_owned());
    let mut parts = line.split(' ');
    let kind = parts
        .next()
        .and_then(FrameKind::from_letter)
        .ok_or_else(bad)?;
    let id: u64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let len: u64 = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    if parts.next().is_some() {
        return Err(bad());
    }
    match usize::try_from(len) {
        Ok(n) if n <= MAX_PAYLOAD => Ok((kind, id, n)),
        _ => Err(FrameError::TooLarge(len)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_survive_any_split_of_the_stream() {
        let frames = vec![
            Frame::new(FrameKind::Hello, 0, b"1".to_vec()),
            Frame::new(FrameKind::Reply, 7, b"{\"v\":1}\n\xff\x00 R 9 3\n".to_vec()),
            Frame::new(FrameKind::Beat, 0, Vec::new()),
            Frame::new(FrameKind::Request, u64::MAX, vec![b'x'; 70_000]),
        ];
        let wire: Vec<u8> = frames.iter().flat_map(Frame::encode).collect();
        for piece in [1, 2, 3, 7, 64, 4096, wire.len()] {
            let mut d = Decoder::new();
            let mut got = Vec::new();
            for chunk in wire.chunks(piece) {
                d.push(chunk);
                while let Some(f) = d.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, frames, "pieces of {piece}");
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn garbage_is_an_error_that_stays() {
        let cases: [&[u8]; 6] = [
            b"hello world\n",
            b"Q 1\n",
            b"Q x 3\n",
            b"Q 1 2 3\n",
            b"Z 1 1\nx",
            &[b'Q'; 100],
        ];
        for bytes in cases {
            let mut d = Decoder::new();
            d.push(bytes);
            let e = d.next_frame().unwrap_err();
            assert!(matches!(e, FrameError::BadHeader(_)), "{bytes:?}: {e}");
            d.push(b"B 0 0\n");
            assert_eq!(d.next_frame().unwrap_err(), e, "broken stays broken");
        }
        let mut d = Decoder::new();
        d.push(format!("R 1 {}\n", MAX_PAYLOAD + 1).as_bytes());
        assert!(matches!(d.next_frame(), Err(FrameError::TooLarge(_))));
    }

    #[test]
    fn a_partial_frame_waits_for_the_rest() {
        let mut d = Decoder::new();
        d.push(b"R 3 5\nab");
        assert_eq!(d.next_frame().unwrap(), None);
        d.push(b"cde");
        let f = d.next_frame().unwrap().unwrap();
        assert_eq!(
            (f.kind, f.id, f.payload),
            (FrameKind::Reply, 3, b"abcde".to_vec())
        );
        assert_eq!(d.next_frame().unwrap(), None);
    }
}
