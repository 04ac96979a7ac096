//! The caller's and the desk's edges, which no workload reaches: the
//! limits at their exact values, a deadline set per call, and a call of a
//! cell that has ended.

use super::{check, CallEnd, Caller};
use crate::agent::os::Os;
use crate::agent::tests::FakeOs;
use crate::protocol::calls::{
    CallRequest, CALLER_POLL, ENV_DIR, ENV_TIMEOUT, ENV_TOKEN, MAX_ARGS, MAX_NAME,
};

const CELL: &str = "/k/cells/1";
const DIR: &str = "/k/cells/1/calls";

/// A running cell's calls directory (the fake OS knows a directory by a
/// file in it).
fn running_cell() -> FakeOs {
    let mut os = FakeOs::new();
    os.write_atomic(&format!("{DIR}/.here"), b"").unwrap();
    os
}

/// The environment of a process of the cell, with `TETHER_CALL_TIMEOUT`
/// set to `timeout` if given.
fn env(timeout: Option<&str>) -> impl Fn(&str) -> Option<String> + '_ {
    move |name: &str| match name {
        ENV_DIR => Some(DIR.to_owned()),
        ENV_TOKEN => Some("t".to_owned()),
        ENV_TIMEOUT => timeout.map(str::to_owned),
        _ => None,
    }
}

fn start(os: &mut FakeOs, json: &str, timeout: Option<&str>) -> Result<Caller, CallEnd> {
    Caller::start(os, &env(timeout), "tool", json, "c1".into())
}

fn refused(end: Option<CallEnd>) -> bool {
    matches!(end, Some(CallEnd::Failed { message, code: 1 }) if message.starts_with("refused"))
}

#[test]
fn a_name_of_exactly_the_limit_passes_one_byte_more_is_refused() {
    let req = |name: String| CallRequest {
        id: "a".into(),
        token: "t".into(),
        name,
        args: 1.into(),
    };
    assert_eq!(check("a", &req("n".repeat(MAX_NAME)), "t", 0), None);
    assert!(check("a", &req("n".repeat(MAX_NAME + 1)), "t", 0)
        .is_some_and(|m| m.contains(&format!("1 to {MAX_NAME} bytes"))));
}

#[test]
fn arguments_of_exactly_the_limit_pass_one_byte_more_is_refused() {
    // A JSON string of MAX_ARGS bytes, quotes included.
    let at_limit = format!("\"{}\"", "x".repeat(MAX_ARGS - 2));
    let over = format!("\"{}\"", "x".repeat(MAX_ARGS - 1));
    assert_eq!(at_limit.len(), MAX_ARGS);
    // The desk's check, on the arguments as the request carries them.
    let req = |json: &str| CallRequest {
        id: "a".into(),
        token: "t".into(),
        name: "n".into(),
        args: serde_json::from_str(json).unwrap(),
    };
    assert_eq!(check("a", &req(&at_limit), "t", 0), None);
    assert!(check("a", &req(&over), "t", 0).is_some_and(|m| m.contains("over the limit")));
    // The caller's, before it writes anything.
    let mut os = running_cell();
    assert!(start(&mut os, &at_limit, None).is_ok());
    let mut os = running_cell();
    match start(&mut os, &over, None) {
        Err(CallEnd::Failed { message, code: 1 }) => assert!(message.contains("over the limit")),
        other => panic!("{over:.20}… was let through: {other:?}"),
    }
    assert!(!os.exists(&format!("{DIR}/c1.req")), "no request written");
}

#[test]
fn a_deadline_set_per_call_ends_the_call_then_and_not_later() {
    let mut os = running_cell();
    os.now = 1_000;
    let caller = start(&mut os, "{}", Some("2.5")).unwrap();
    os.now = 3_499;
    assert_eq!(caller.poll(&os), None, "before its deadline the call waits");
    os.now = 3_500;
    match caller.poll(&os) {
        Some(CallEnd::Failed { message, code: 1 }) => {
            assert!(message.starts_with("no answer within"), "{message}");
        }
        other => panic!("the call did not end at its 2.5 s deadline: {other:?}"),
    }
}

#[test]
fn a_deadline_that_is_not_a_positive_number_is_the_default() {
    use crate::protocol::calls::DEFAULT_CALL_TIMEOUT;
    let default_ms = u64::try_from(DEFAULT_CALL_TIMEOUT.as_millis()).unwrap();
    for bad in ["0", "-3", "nan", "inf", "soon", "1e30"] {
        let mut os = running_cell();
        let caller = start(&mut os, "{}", Some(bad)).unwrap();
        os.now = default_ms - 1;
        assert_eq!(
            caller.poll(&os),
            None,
            "{bad:?}: ended before the default deadline"
        );
        os.now = default_ms;
        assert!(
            caller.poll(&os).is_some(),
            "{bad:?}: not ended at the default deadline"
        );
    }
}

#[test]
fn a_call_of_a_cell_that_has_ended_is_refused_at_once() {
    let done = crate::agent::journal::done_flag(
        &crate::agent::layout::CellLayout::from_dir(CELL).journal(),
    );
    // Ended before the call: refused before a request is written.
    let mut os = running_cell();
    os.write_atomic(&done, b"").unwrap();
    assert!(refused(start(&mut os, "{}", None).err()));
    assert!(!os.exists(&format!("{DIR}/c1.req")));
    // Ended while the call waits: refused at the next look, not at its
    // deadline.
    let mut os = running_cell();
    let caller = start(&mut os, "{}", None).unwrap();
    assert_eq!(caller.poll(&os), None);
    os.write_atomic(&done, b"").unwrap();
    os.now += u64::try_from(CALLER_POLL.as_millis()).unwrap();
    assert!(refused(caller.poll(&os)));
    // Its calls directory gone (acked away): the same.
    let mut os = running_cell();
    let caller = start(&mut os, "{}", None).unwrap();
    os.remove_all(DIR).unwrap();
    assert!(refused(caller.poll(&os)));
}
