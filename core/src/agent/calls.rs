//! The sandbox's side of tool calls (see [`crate::protocol::calls`]): the
//! shim's [`CallDesk`], which checks each request a caller wrote into the
//! cell's calls directory and journals it or refuses it, and
//! [`deliver`], which an op runs to write the host's answers.
//!
//! Authority lasts exactly as long as the cell: a request is honoured only
//! with the cell's credential (a random token the shim made for this cell
//! and put in its environment), only while the shim pumps the running
//! cell, and an answer is written only while the cell's journal has no
//! result. A refused request is never journaled, so it never reaches the
//! host.

use super::journal::{read_journal, JournalWriter};
use super::layout::CellLayout;
use super::os::{Os, OsError};
use crate::protocol::calls::{
    valid_id, CallAnswer, CallReply, CallRequest, ENV_DIR, ENV_TOKEN, MAX_ARGS, MAX_CALLS, MAX_NAME,
};
use crate::protocol::EntryKind;
use std::collections::BTreeMap;

/// `{cell}/calls`: where callers write requests and read answers.
pub fn calls_dir(cell: &CellLayout) -> String {
    format!("{}/calls", cell.dir())
}

/// `{dir}/ID.req`.
pub fn request_path(dir: &str, id: &str) -> String {
    format!("{dir}/{id}.req")
}

/// `{dir}/ID.ans`.
pub fn answer_path(dir: &str, id: &str) -> String {
    format!("{dir}/{id}.ans")
}

/// `{kernel}/bin`: where `tether-call` is found (on the cells' PATH).
pub fn bin_dir(kernel_dir: &str) -> String {
    format!("{}/bin", kernel_dir.trim_end_matches('/'))
}

/// What became of a request the desk has seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    Refused,
    Journaled,
    Answered,
}

/// Why a request is refused, or `None` when it may go to the host.
/// `journaled` is how many calls of the cell were journaled before.
pub fn check(
    file_id: &str,
    request: &CallRequest,
    token: &str,
    journaled: usize,
) -> Option<String> {
    if request.id != file_id {
        return Some(format!(
            "the request's id {:?} is not its file's ({file_id})",
            request.id
        ));
    }
    if request.token != token {
        return Some(
            "refused: the call does not carry the running cell's credential \
             (a process of another cell, or of a cell that has ended)"
                .into(),
        );
    }
    if request.name.is_empty() || request.name.len() > MAX_NAME {
        return Some(format!(
            "a tool's name must have 1 to {MAX_NAME} bytes, not {}",
            request.name.len()
        ));
    }
    let size = serde_json::to_vec(&request.args).map_or(usize::MAX, |v| v.len());
    if size > MAX_ARGS {
        return Some(format!(
            "the call's arguments are {size} bytes, over the limit of {MAX_ARGS}"
        ));
    }
    if journaled >= MAX_CALLS {
        return Some(format!(
            "this cell made {MAX_CALLS} tool calls already, the limit per cell"
        ));
    }
    None
}

/// One cell's calls, as its shim sees them.
#[derive(Clone, Debug)]
pub struct CallDesk {
    dir: String,
    token: String,
    seen: BTreeMap<String, Seen>,
    journaled: usize,
}

impl CallDesk {
    /// Makes the cell's calls directory and its credential.
    pub fn open(os: &mut dyn Os, cell: &CellLayout) -> Result<CallDesk, OsError> {
        let dir = calls_dir(cell);
        // In the cell's directory, which exists: a kernel shut down
        // meanwhile is not made again.
        os.create_dir(&dir)?;
        Ok(CallDesk {
            dir,
            token: os.random_token(),
            seen: BTreeMap::new(),
            journaled: 0,
        })
    }

    /// The calls directory.
    pub fn dir(&self) -> &str {
        &self.dir
    }

    /// The cell's credential.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// What the cell's processes carry in their environment.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (ENV_DIR.to_owned(), self.dir.clone()),
            (ENV_TOKEN.to_owned(), self.token.clone()),
        ]
    }

    /// One look at the calls directory (each pump tick while the cell
    /// runs): new requests are journaled or refused; answers that appeared
    /// for journaled calls are journaled as `tool_answered`.
    pub fn tick(&mut self, os: &mut dyn Os, journal: &mut JournalWriter) -> Result<(), OsError> {
        if journal.has_result() {
            return Ok(());
        }
        let names = match os.list_dir(&self.dir) {
            Ok(names) => names,
            Err(OsError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        for name in names {
            let Some(id) = name.strip_suffix(".req") else {
                continue;
            };
            if !valid_id(id) || self.seen.contains_key(id) {
                continue;
            }
            let request = os
                .read_file(&request_path(&self.dir, id))
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    serde_json::from_slice::<CallRequest>(&b)
                        .map_err(|e| format!("the request is not a tool call: {e}"))
                });
            let refusal = match &request {
                Ok(r) => check(id, r, &self.token, self.journaled),
                Err(e) => Some(e.clone()),
            };
            match (refusal, request) {
                (None, Ok(r)) => {
                    // Seen before the push: a push that cannot write keeps
                    // the entry queued, so the next look must not queue it
                    // again (a full disk once queued one call per tick).
                    self.journaled += 1;
                    self.seen.insert(id.to_owned(), Seen::Journaled);
                    journal.push(
                        os,
                        EntryKind::ToolCall {
                            id: r.id,
                            name: r.name,
                            args: r.args,
                        },
                    )?;
                }
                (refusal, _) => {
                    let message = refusal.unwrap_or_default();
                    let reply =
                        serde_json::to_vec(&CallReply::Error { message }).unwrap_or_default();
                    match os.create_new(&answer_path(&self.dir, id), &reply) {
                        Ok(()) | Err(OsError::AlreadyExists) => {}
                        Err(e) => return Err(e),
                    }
                    self.seen.insert(id.to_owned(), Seen::Refused);
                }
            }
        }
        self.note_answers(os, journal)
    }

    /// Answers that appeared for journaled calls are journaled as
    /// `tool_answered` (each once), unless the cell's result is there.
    pub fn note_answers(
        &mut self,
        os: &mut dyn Os,
        journal: &mut JournalWriter,
    ) -> Result<(), OsError> {
        if journal.has_result() {
            return Ok(());
        }
        let waiting: Vec<String> = self
            .seen
            .iter()
            .filter(|(_, s)| **s == Seen::Journaled)
            .map(|(id, _)| id.clone())
            .collect();
        for id in waiting {
            if os.exists(&answer_path(&self.dir, &id)) {
                // Answered before the push, for the reason `tick` gives.
                self.seen.insert(id.clone(), Seen::Answered);
                journal.push(os, EntryKind::ToolAnswered { id })?;
            }
        }
        Ok(())
    }
}

/// Writes the host's answers for `cell` (an op, before it waits). Each is
/// written only if the cell's journal has journaled that call and holds no
/// result yet; the first answer for a call wins (a resent one is a no-op).
/// Returns how many were written now.
pub fn deliver(
    os: &mut dyn Os,
    cell: &CellLayout,
    answers: &[CallAnswer],
) -> Result<usize, OsError> {
    if answers.is_empty() {
        return Ok(0);
    }
    let read = read_journal(os, &cell.journal())?;
    if read
        .entries
        .iter()
        .any(|e| matches!(e.kind, EntryKind::Result { .. } | EntryKind::Done))
    {
        return Ok(0);
    }
    let dir = calls_dir(cell);
    let mut written = 0;
    for answer in answers {
        let journaled = read
            .entries
            .iter()
            .any(|e| matches!(&e.kind, EntryKind::ToolCall { id, .. } if *id == answer.id));
        if !valid_id(&answer.id) || !journaled {
            continue;
        }
        let reply = crate::protocol::calls::bounded(answer.reply.clone());
        let bytes = serde_json::to_vec(&reply).unwrap_or_default();
        match os.create_new(&answer_path(&dir, &answer.id), &bytes) {
            Ok(()) => written += 1,
            Err(OsError::AlreadyExists) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// How a caller's call ended: the exit status of `tether-call` and what it
/// prints (the result on stdout, or the error on stderr).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallEnd {
    /// The host's result: a string as it is, any other value as compact
    /// JSON (printed with a newline), status 0.
    Answered {
        /// What goes to stdout.
        stdout: String,
    },
    /// The host's error, a refusal, a deadline, or bad usage.
    Failed {
        /// What goes to stderr (after `tether-call NAME: `).
        message: String,
        /// 1: the call failed; 2: bad usage, or not inside a cell.
        code: u8,
    },
}

fn failed(message: impl Into<String>, code: u8) -> CallEnd {
    CallEnd::Failed {
        message: message.into(),
        code,
    }
}

/// One call of `tether-call` (the real caller in the agent binary, and the
/// simulated one): [`Caller::start`] writes the request with the cell's
/// credential from the caller's environment, then [`Caller::poll`] every
/// [`crate::protocol::calls::CALLER_POLL`] until it says how the call
/// ended.
#[derive(Clone, Debug)]
pub struct Caller {
    dir: String,
    id: String,
    done: String,
    timeout: std::time::Duration,
    deadline: crate::time::Timestamp,
}

impl Caller {
    /// Checks the call and writes its request. `env` reads the caller's
    /// environment; `json` is the arguments as given; `id` is fresh
    /// (random, [`valid_id`]).
    pub fn start(
        os: &mut dyn Os,
        env: &dyn Fn(&str) -> Option<String>,
        name: &str,
        json: &str,
        id: String,
    ) -> Result<Caller, CallEnd> {
        use crate::protocol::calls::{DEFAULT_CALL_TIMEOUT, ENV_TIMEOUT};
        let args: serde_json::Value = serde_json::from_str(json)
            .map_err(|e| failed(format!("the arguments are not JSON: {e}"), 2))?;
        let (Some(dir), Some(token)) = (env(ENV_DIR), env(ENV_TOKEN)) else {
            return Err(failed(
                format!("not inside a tether cell ({ENV_DIR} and {ENV_TOKEN} are not set)"),
                2,
            ));
        };
        let size = json.len();
        if size > MAX_ARGS {
            return Err(failed(
                format!("the arguments are {size} bytes, over the limit of {MAX_ARGS}"),
                1,
            ));
        }
        let cell_dir = dir
            .trim_end_matches('/')
            .rsplit_once('/')
            .map_or_else(String::new, |(p, _)| p.to_owned());
        let done = super::journal::done_flag(&CellLayout::from_dir(&cell_dir).journal());
        let timeout = env(ENV_TIMEOUT)
            .and_then(|s| s.trim().parse::<f64>().ok())
            // Zero is no deadline; a negative, NaN, infinite or too large
            // (`1e30`) one no Duration holds: the default for each.
            .filter(|s| *s > 0.0)
            .and_then(|s| std::time::Duration::try_from_secs_f64(s).ok())
            .unwrap_or(DEFAULT_CALL_TIMEOUT);
        let caller = Caller {
            deadline: os.now() + timeout,
            timeout,
            dir,
            id,
            done,
        };
        if caller.ended(os) {
            return Err(failed(
                "refused: the cell this process belongs to has ended (a tool call is honoured only while its cell runs)",
                1,
            ));
        }
        let request = CallRequest {
            id: caller.id.clone(),
            token,
            name: name.to_owned(),
            args,
        };
        let bytes = serde_json::to_vec(&request).unwrap_or_default();
        os.write_atomic(&request_path(&caller.dir, &caller.id), &bytes)
            .map_err(|e| {
                failed(
                    format!("cannot write the request into {}: {e}", caller.dir),
                    1,
                )
            })?;
        Ok(caller)
    }

    fn ended(&self, os: &dyn Os) -> bool {
        os.exists(&self.done) || !os.exists(&self.dir)
    }

    /// The call's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// One look for the answer: `None` while the call waits.
    pub fn poll(&self, os: &dyn Os) -> Option<CallEnd> {
        let answer = answer_path(&self.dir, &self.id);
        if let Ok(bytes) = os.read_file(&answer) {
            match serde_json::from_slice::<CallReply>(&bytes) {
                Ok(CallReply::Ok { value }) => {
                    let stdout = match value {
                        serde_json::Value::String(s) => s,
                        other => other.to_string(),
                    };
                    return Some(CallEnd::Answered {
                        stdout: format!("{stdout}\n"),
                    });
                }
                Ok(CallReply::Error { message }) => return Some(failed(message, 1)),
                // Being written: look again.
                Err(_) => {}
            }
        } else if self.ended(os) && !os.exists(&answer) {
            return Some(failed(
                "refused: the cell ended before the host answered",
                1,
            ));
        }
        if os.now() >= self.deadline {
            return Some(failed(
                format!(
                    "no answer within {:.0} s (the deadline per call; {} sets it in seconds)",
                    self.timeout.as_secs_f64(),
                    crate::protocol::calls::ENV_TIMEOUT
                ),
                1,
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests;
