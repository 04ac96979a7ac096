use super::*;

#[test]
fn the_corpus_is_valid_and_modelled_under_both_shells() {
    for case in corpus() {
        for cell in &case.cells {
            cell.workload.validate().unwrap();
        }
        for flavor in [Flavor::Bash, Flavor::Dash] {
            if case.bash_only && flavor == Flavor::Dash {
                continue;
            }
            let results =
                run_cells(flavor, &case.cells).unwrap_or_else(|e| panic!("{}: {e:?}", case.name));
            assert_eq!(results.len(), case.cells.len());
        }
    }
}

#[test]
fn a_snapshot_round_trips_and_only_a_complete_one_counts() {
    let mut s = ShellState::default();
    s.assign("a", "x\n'y'", true);
    s.apply(&StateChange::Function {
        name: "f".into(),
        text: "hi".into(),
    });
    let bytes = s.to_snapshot();
    assert!(tether_core::agent::shell::snapshot_complete(&bytes));
    assert_eq!(ShellState::from_snapshot(&bytes), Some(s));
    assert_eq!(ShellState::from_snapshot(&bytes[..bytes.len() - 2]), None);
}

#[test]
fn bash_keeps_what_dash_cannot_list_and_both_keep_through_exit() {
    let cells = vec![
        CaseCell {
            workload: Workload::new(vec![
                Step::SetName {
                    name: "v".into(),
                    value: "1".into(),
                },
                Step::State {
                    change: StateChange::Function {
                        name: "f".into(),
                        text: "from f".into(),
                    },
                },
                Step::Exit { code: 3 },
            ]),
            cancel: false,
        },
        CaseCell {
            workload: Workload::new(vec![
                Step::Show {
                    probe: Probe::Var { name: "v".into() },
                },
                Step::Show {
                    probe: Probe::Function { name: "f".into() },
                },
            ]),
            cancel: false,
        },
    ];
    let bash = run_cells(Flavor::Bash, &cells).unwrap();
    assert_eq!(bash[0].outcome, CellOutcome::Exit { code: 3 });
    assert_eq!(bash[1].stdout, "v=1\nfrom f\n");
    let dash = run_cells(Flavor::Dash, &cells).unwrap();
    assert_eq!(dash[1].stdout, "v=1\nfunction f undefined\n");
}

#[test]
fn both_shells_keep_the_positional_parameters_through_exit() {
    let set = |values: &[&str]| Step::State {
        change: StateChange::Positional {
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        },
    };
    let show = Step::Show {
        probe: Probe::Positional,
    };
    let cells = vec![
        CaseCell {
            workload: Workload::new(vec![show.clone(), set(&["a", "b c", ""])]),
            cancel: false,
        },
        CaseCell {
            workload: Workload::new(vec![show.clone(), set(&["x"]), Step::Exit { code: 2 }]),
            cancel: false,
        },
        CaseCell {
            workload: Workload::new(vec![show]),
            cancel: false,
        },
    ];
    for flavor in [Flavor::Bash, Flavor::Dash] {
        let got = run_cells(flavor, &cells).unwrap();
        assert_eq!(got[0].stdout, "args 0\n");
        assert_eq!(got[1].stdout, "args 3 [a] [b c] []\n");
        assert_eq!(got[2].stdout, "args 1 [x]\n");
    }
}
