//! Exec over `turmoil::net`: one TCP connection per exec call, carrying a
//! length-prefixed JSON request (`argv`, `stdin`) and, if the command's
//! reply is not lost, a length-prefixed JSON response (`stdout`, `stderr`,
//! `exit_code`).
//!
//! - [`call`]: the client half (used by [`crate::world`]'s `SimTransport`);
//! - [`serve`]: the sandbox half, an accept loop that hands each request to
//!   a handler running on the sandbox host. The handler may answer `None`
//!   ("the op ran, the reply was lost"): the connection then closes without
//!   a response, which the client sees as a transport error.

use serde::{Deserialize, Serialize};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use tether_core::bytes::Bytes;
use tether_core::protocol::OpKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The port the sandbox's exec server listens on.
pub const EXEC_PORT: u16 = 7022;

/// Frames larger than this are refused (a corrupt length prefix must not
/// allocate gigabytes).
const MAX_FRAME: u32 = 64 << 20;

/// One exec call on the wire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRequest {
    /// The command.
    pub argv: Vec<String>,
    /// Its stdin.
    pub stdin: Bytes,
    /// The agent op it carries, as the client rendered it.
    pub op: Option<OpKind>,
}

/// The result of a command that ran to completion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireResponse {
    /// What it printed on stdout.
    pub stdout: Bytes,
    /// What it printed on stderr.
    pub stderr: Bytes,
    /// Its exit code.
    pub exit_code: i32,
}

/// Writes one length-prefixed JSON frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> io::Result<()> {
    let body = serde_json::to_vec(value).map_err(io::Error::other)?;
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l <= MAX_FRAME)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "frame too large"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(&body).await?;
    w.flush().await
}

/// Reads one length-prefixed JSON frame.
pub async fn read_frame<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(
    r: &mut R,
) -> io::Result<T> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes is over the limit"),
        ));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    serde_json::from_slice(&body).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Runs one exec call against the server at `addr` (`host:port`). Any
/// failure — refused, reset, closed before the response — is an `io::Error`:
/// the caller cannot know whether the command ran.
pub async fn call(addr: &str, req: &WireRequest) -> io::Result<WireResponse> {
    let mut stream = turmoil::net::TcpStream::connect(addr).await?;
    write_frame(&mut stream, req).await?;
    read_frame(&mut stream).await
}

/// What a handler returns: the response, or `None` when the reply is lost.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Option<WireResponse>>>>;

/// Serves exec calls on `0.0.0.0:port` forever, one task per connection.
/// The handler runs on the sandbox host (no `Send` needed).
pub async fn serve(port: u16, handler: Rc<dyn Fn(WireRequest) -> HandlerFuture>) -> io::Result<()> {
    let listener = turmoil::net::TcpListener::bind(("0.0.0.0", port)).await?;
    loop {
        let (mut stream, _) = listener.accept().await?;
        let handler = handler.clone();
        tokio::task::spawn_local(async move {
            let Ok(req) = read_frame::<_, WireRequest>(&mut stream).await else {
                return;
            };
            if let Some(resp) = handler(req).await {
                let _ = write_frame(&mut stream, &resp).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn echo(req: WireRequest) -> HandlerFuture {
        Box::pin(async move {
            if req.argv.first().map(String::as_str) == Some("lose") {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
            Some(WireResponse {
                stdout: req.stdin.clone(),
                stderr: Bytes(req.argv.join(" ").into_bytes()),
                exit_code: 3,
            })
        })
    }

    #[test]
    fn echo_server_answers_and_lost_replies_are_errors() {
        let mut sim = turmoil::Builder::new().rng_seed(7).build();
        sim.host("sandbox", || async {
            serve(EXEC_PORT, Rc::new(echo)).await?;
            Ok(())
        });
        sim.client("client", async {
            let addr = format!("sandbox:{EXEC_PORT}");
            let resp = call(
                &addr,
                &WireRequest {
                    argv: vec!["cat".into(), "-".into()],
                    stdin: Bytes(vec![0xff, b'x']),
                    op: None,
                },
            )
            .await?;
            assert_eq!(resp.stdout, Bytes(vec![0xff, b'x']));
            assert_eq!(resp.stderr, Bytes(b"cat -".to_vec()));
            assert_eq!(resp.exit_code, 3);
            let lost = call(
                &addr,
                &WireRequest {
                    argv: vec!["lose".into()],
                    stdin: Bytes::default(),
                    op: None,
                },
            )
            .await;
            assert!(lost.is_err());
            Ok(())
        });
        sim.run().unwrap();
    }

    #[test]
    fn partitioned_call_never_answers() {
        let mut sim = turmoil::Builder::new().rng_seed(7).build();
        sim.host("sandbox", || async {
            serve(EXEC_PORT, Rc::new(echo)).await?;
            Ok(())
        });
        sim.client("client", async {
            turmoil::partition("client", "sandbox");
            let r = tokio::time::timeout(
                Duration::from_secs(2),
                call(
                    &format!("sandbox:{EXEC_PORT}"),
                    &WireRequest {
                        argv: vec!["x".into()],
                        stdin: Bytes::default(),
                        op: None,
                    },
                ),
            )
            .await;
            assert!(!matches!(r, Ok(Ok(_))));
            turmoil::repair("client", "sandbox");
            Ok(())
        });
        sim.run().unwrap();
    }
}
