//! Output bytes that survive JSON exactly: valid UTF-8 travels as text,
//! anything else as base64, so not-UTF-8 output is never lost or mangled.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A byte string carried in JSON without loss.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bytes(pub Vec<u8>);

#[derive(Serialize, Deserialize)]
enum Wire {
    #[serde(rename = "text")]
    Text(String),
    #[serde(rename = "b64")]
    Base64(String),
}

impl Bytes {
    /// The raw bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    /// Number of bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&[u8]> for Bytes {
    fn from(b: &[u8]) -> Self {
        Bytes(b.to_vec())
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(b: Vec<u8>) -> Self {
        Bytes(b)
    }
}

impl From<&str> for Bytes {
    fn from(s: &str) -> Self {
        Bytes(s.as_bytes().to_vec())
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{:?}", String::from_utf8_lossy(&self.0))
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => Wire::Text(text.to_owned()).serialize(s),
            Err(_) => Wire::Base64(STANDARD.encode(&self.0)).serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Wire::deserialize(d)? {
            Wire::Text(text) => Ok(Bytes(text.into_bytes())),
            Wire::Base64(b64) => STANDARD
                .decode(b64.as_bytes())
                .map(Bytes)
                .map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_binary_round_trip_exactly() {
        for raw in [b"hello\n".to_vec(), vec![0xff, 0xfe, 0, b'a'], Vec::new()] {
            let json = serde_json::to_string(&Bytes(raw.clone())).unwrap();
            let back: Bytes = serde_json::from_str(&json).unwrap();
            assert_eq!(back.0, raw, "via {json}");
        }
        assert_eq!(
            serde_json::to_string(&Bytes::from("hi")).unwrap(),
            r#"{"text":"hi"}"#
        );
    }
}
