//! The world a seed runs in (swarm testing): each seed draws, from its own
//! ChaCha stream, the sandbox's configuration, the client's knobs and the
//! density of its faults, so that no mechanism is always on to hide another
//! (cgroups hide the marker, session and subreaper arms of cancel; a new
//! boot id on every bounce hides the start-time and nonce checks of the
//! probe; a reaping init hides zombie waits; a huge pid space hides reuse;
//! an idle timeout of an hour hides the daemon's idle exit).
//!
//! The world is a pure function of (scenario, seed): a replay with the
//! same seed runs in the same world, and every failure report prints it.
//! Race files written before the swarm carry no world and replay in
//! [`World::classic`], the one world every seed used to run in.

use crate::faults::{Family, Fault, FaultKind, CRASH_POINTS};
use crate::scenario::Scenario;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::fmt;
use tether_core::protocol::Lang;

/// One seed's world.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct World {
    /// cgroup v2 is writable: each cell gets its own cgroup.
    pub cgroups: bool,
    /// `bash` is on the sandbox (else shell cells run under `/bin/sh`).
    pub bash: bool,
    /// A bounce keeps the boot id and the start-time clock (a container
    /// restart on the same host), so only start times and nonces tell a
    /// reused pid apart.
    pub bounce_keeps_boot_id: bool,
    /// PID 1 reaps orphans.
    pub init_reaps: bool,
    /// Pids wrap here: a small space makes them reused within a run.
    pub pid_max: u32,
    /// The client's grace between TERM and KILL (ms).
    pub grace_ms: u64,
    /// The client's long-poll bound (ms).
    pub wait_ms: u64,
    /// The daemon exits by itself after this much idleness (ms).
    pub daemon_idle_ms: u64,
    /// How many faults the seed draws (before the scenario's fixed ones).
    pub faults: usize,
    /// Faults are placed in `[0, window_ms)`: the whole run, shutdown
    /// included, not only its first seconds.
    pub window_ms: u64,
    /// The fault families the seed draws from.
    pub families: Vec<Family>,
    /// How long a shim takes from its fork to its first step (ms): a
    /// cancel can land between the daemon's look at the tombstone and the
    /// shim's.
    #[serde(default)]
    pub shim_start_ms: u64,
    /// The client keeps at most this many kernels open (its reaper evicts
    /// the least recently used idle one beyond it).
    #[serde(default = "classic_max_kernels")]
    pub max_kernels: usize,
    /// The client shuts a kernel down after this much idleness (ms).
    #[serde(default = "classic_kernel_idle_ms")]
    pub kernel_idle_ms: u64,
    /// A partition or hold long enough for the client's attempts to run
    /// out, or its give-up timer (`unreachable_after`, 15 s) to fire, added
    /// to the drawn faults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_outage: Option<Fault>,
    /// What keeps a kernel from starting on the sandbox (fail open),
    /// drawn only for a scenario about it ([`Scenario::fails_open`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flaw: Option<Flaw>,
    /// The client runs a cell without a kernel where none can start
    /// (`Config::fallback`); off, it refuses the cell with the reason.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub fallback: bool,
    /// The client's ops ride the sandbox's channel (one long-lived stream,
    /// several ops in flight, one-shot execs while it is not open), as
    /// `tether` does; off, every op is its own exec. A seed on the
    /// channel also draws faults on it ([`Family::CHANNEL`]).
    #[serde(default)]
    pub channel: bool,
    /// Chance (per mille) that an agent step (a daemon's tick, an op's
    /// poll) is preempted at one of its OS calls while the rest of the
    /// sandbox runs on for a few milliseconds (the simulation's
    /// `os::preempt`); 0: every step is atomic.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub preempt_permille: u32,
    /// A write on a full disk may put part of its bytes down before it
    /// fails, as `write(2)` does when the space runs out mid-buffer: an
    /// append under a `disk_full` fault leaves a torn last line (the
    /// journal's repair and reader see one); off, every refused write
    /// leaves the file as it was.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub torn_writes: bool,
    /// The client's cells come with CRLF line ends (typed at a terminal, or
    /// sent by a frontend that writes them): the agent must take them as
    /// LF. The simulation's cell code is JSON, so the CRs are whitespace
    /// to it, and only the agent's handling of them is judged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crlf: bool,
    /// Processes due at the same instant run highest pid first; off,
    /// lowest first (mostly: parents before their children). A real scheduler promises neither: a
    /// background child that prints as its shim's drain bound passes may
    /// get there before the shim or after it, and each order is a run.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub high_pids_first: bool,
    /// How late (ms) a shell cell shim's poll timeout fires after its
    /// deadline, as on a loaded machine: output that reaches a pipe as the
    /// drain bound passes wakes the shim first, and its last read of the
    /// pipes finds it (the cell's output, which a shim that took its last
    /// read for the background log's would lose).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub timer_slack_ms: u64,
    /// How long (ms) a fresh Python interpreter takes from its start to
    /// its bootstrap's first look at stdin (imports, a loaded machine; a
    /// real `python3` takes tens of ms): SIGINT is ignored meanwhile (it
    /// starts so), and a cell handed over is read only then.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub interp_start_ms: u64,
    /// Two writers killed right after a crash point each
    /// ([`crate::faults::CRASH_POINTS`]), added to the drawn faults of
    /// every scenario with a kernel (not fail open's): a sweep, not a
    /// draw, so ten seeds of a scenario meet every crash point once (one
    /// drawn among the seed's other faults meets a given one in about 1 of
    /// 200 seeds: a launch whose daemon died before its record, when two
    /// writes were told apart by one `||`, ran its cell twice and no
    /// sample of the explorer's saw it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub crash_kills: Vec<Fault>,
}

/// What keeps a kernel from starting on a sandbox: each is answered as
/// the real sandbox answers it (the install script's typed refusal, the
/// agent's `python_missing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flaw {
    /// The agent's root is on a read-only mount: the install cannot make
    /// its directories (`cannot_install`).
    ReadOnlyRoot,
    /// The agent's root is on a `noexec` mount: the agent is written but
    /// cannot run (`cannot_install`).
    NoexecRoot,
    /// No `python3`: a Python kernel cannot start (`python_missing`); a
    /// shell kernel can.
    NoPython3,
}

impl Flaw {
    /// Every flaw, in a fixed order.
    pub const ALL: [Flaw; 3] = [Flaw::ReadOnlyRoot, Flaw::NoexecRoot, Flaw::NoPython3];

    /// Does it keep a kernel of `lang` from starting?
    pub fn blocks(self, lang: Lang) -> bool {
        match self {
            Flaw::ReadOnlyRoot | Flaw::NoexecRoot => true,
            Flaw::NoPython3 => lang == Lang::Python,
        }
    }

    /// What the reason for the refusal must say (a piece of the install
    /// script's or the agent's detail).
    pub fn reason_says(self) -> &'static str {
        match self {
            Flaw::ReadOnlyRoot => "cannot create directories under the root",
            Flaw::NoexecRoot => "noexec",
            Flaw::NoPython3 => "python3",
        }
    }
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// The client's kernel cap in the classic world (its default: never
/// reached by a scenario).
const CLASSIC_MAX_KERNELS: usize = 16;

/// The client's kernel idle timeout in the classic world (its default,
/// 30 min: never reached in a run).
const CLASSIC_KERNEL_IDLE_MS: u64 = 30 * 60 * 1_000;

fn classic_max_kernels() -> usize {
    CLASSIC_MAX_KERNELS
}

fn classic_kernel_idle_ms() -> u64 {
    CLASSIC_KERNEL_IDLE_MS
}

/// The longest a daemon idles in the classic world (an hour: never, in a
/// run of the simulation).
const CLASSIC_IDLE_MS: u64 = 3_600_000;

impl World {
    /// The one world every seed ran in before the swarm: cgroups, bash,
    /// a new boot id per bounce, a reaping init (unless the scenario says
    /// otherwise), no pid reuse, the scenario's own fault space.
    pub fn classic(scenario: &Scenario) -> World {
        World {
            cgroups: true,
            bash: true,
            bounce_keeps_boot_id: false,
            init_reaps: scenario.init_reaps,
            pid_max: 32_768,
            grace_ms: 300,
            wait_ms: 2_000,
            daemon_idle_ms: CLASSIC_IDLE_MS,
            faults: 3,
            window_ms: scenario.space.window_ms,
            families: scenario.space.families.clone(),
            shim_start_ms: 0,
            max_kernels: CLASSIC_MAX_KERNELS,
            kernel_idle_ms: CLASSIC_KERNEL_IDLE_MS,
            long_outage: None,
            flaw: None,
            fallback: true,
            channel: false,
            preempt_permille: 0,
            torn_writes: false,
            crlf: false,
            high_pids_first: false,
            timer_slack_ms: 0,
            interp_start_ms: 0,
            crash_kills: Vec::new(),
        }
    }

    /// The world of `seed` for `scenario`, capped at `max_faults` drawn
    /// faults. Scenarios that are about one setting (an init that never
    /// reaps) keep it.
    pub fn draw(scenario: &Scenario, seed: u64, max_faults: usize) -> World {
        // A stream of its own, apart from the fault schedule's and the
        // world's other uses of the seed.
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7377_6172_6d21_2121);
        let cgroups = rng.random_bool(0.5);
        let bash = rng.random_bool(0.6);
        let bounce_keeps_boot_id = rng.random_bool(0.5);
        let init_reaps = rng.random_bool(0.7) && scenario.init_reaps;
        let small_pids = rng.random_bool(0.4);
        let grace_ms = pick(&mut rng, &[100, 300, 300, 1_000]);
        let wait_ms = pick(&mut rng, &[500, 2_000, 2_000, 5_000]);
        // 300 ms is shorter than most cells the scenarios run (a cancelled
        // cell spins 0.5-1 s before its cancel): only a running cell holds
        // off the idle exit then, and a daemon that ignored it would kill
        // its own kernel under the cell (`self_inflicted_loss`). 1.5 s and
        // 4 s let it exit between cells.
        let daemon_idle_ms = pick(
            &mut rng,
            &[CLASSIC_IDLE_MS, CLASSIC_IDLE_MS, 300, 1_500, 4_000],
        );
        let faults = rng.random_range(0..=max_faults);
        let window_ms = pick(&mut rng, &[4_000, 8_000, 12_000]);
        let families = if rng.random_bool(0.5) {
            scenario.space.families.clone()
        } else {
            let older = Family::NETWORK_AND_SANDBOX;
            let mut some: Vec<Family> =
                older.into_iter().filter(|_| rng.random_bool(0.5)).collect();
            if some.is_empty() {
                some.push(older[rng.random_range(0..older.len())]);
            }
            some
        };
        // Drawn last, so the draws above stay what they were.
        let shim_start_ms = pick(&mut rng, &[0, 1, 3]);
        let mut families = families;
        families.extend(draw_process_families(&mut rng));
        // The client's reaper: a cap of 1 or 2 kernels (a scenario with
        // more evicts one), an idle timeout short enough to fire while
        // another kernel's cell runs.
        let max_kernels = [1, 2, CLASSIC_MAX_KERNELS][rng.random_range(0..3)];
        let kernel_idle_ms = pick(
            &mut rng,
            &[CLASSIC_KERNEL_IDLE_MS, CLASSIC_KERNEL_IDLE_MS, 500, 2_000],
        );
        // Sometimes an outage as long as the client's retries, or longer
        // than its give-up timer: virtual time, so it costs a run nothing
        // in wall time. From 4 s, where the call in flight fails at its
        // deadline and then the attempts limit decides whether the client
        // gives up before the outage ends (a client that gave up one
        // attempt early survived every world while they started at 15 s).
        let long_outage = rng.random_bool(0.15).then(|| {
            let for_ms = rng.random_range(4_000..40_000);
            Fault {
                at_ms: rng.random_range(0..window_ms),
                kind: if rng.random_bool(0.5) {
                    FaultKind::PartitionExec { for_ms }
                } else {
                    FaultKind::HoldExec { for_ms }
                },
            }
        });
        // Drawn after everything else, as the process faults were.
        families.extend(draw_later_families(&mut rng));
        // Only a scenario about failing open draws a flawed sandbox (last,
        // so every other draw stays what it was).
        let (flaw, fallback) = if scenario.fails_open {
            let flaw = Flaw::ALL[rng.random_range(0..Flaw::ALL.len())];
            (Some(flaw), rng.random_bool(0.7))
        } else {
            (None, true)
        };
        // Drawn last of all, so every draw above stays what it was.
        let channel = rng.random_bool(0.5);
        if channel {
            families.extend(Family::CHANNEL.into_iter().filter(|_| rng.random_bool(0.5)));
        }
        // After the channel's draws, for the same reason: some seeds never
        // preempt an agent step, some often do.
        let preempt_permille = [0, 0, 20, 100, 300][rng.random_range(0..5)];
        // Last again, and only where a disk can fill: the others' worlds
        // stay what they were.
        let disk_fills = families.contains(&Family::DiskFull)
            || scenario
                .fixed
                .0
                .iter()
                .any(|f| matches!(f.kind, FaultKind::DiskFull { .. }));
        let torn_writes = disk_fills && rng.random_bool(0.5);
        // Last of all, for the same reason.
        let crlf = rng.random_bool(0.25);
        // And after it, the families added since.
        families.extend(Family::LAST.into_iter().filter(|_| rng.random_bool(0.2)));
        // Last of all: the order of processes due at one instant.
        let high_pids_first = rng.random_bool(0.5);
        let timer_slack_ms = pick(&mut rng, &[0, 0, 1, 3]);
        // Last: a slow interpreter start, shorter and longer than a grace.
        let interp_start_ms = pick(&mut rng, &[0, 0, 40, 250, 1_500]);
        // Last of all: the crash-point sweep.
        let crash_kills = if !scenario.fails_open {
            crash_sweep(scenario.name, seed, window_ms, &mut rng)
        } else {
            Vec::new()
        };
        World {
            cgroups,
            bash,
            bounce_keeps_boot_id,
            init_reaps,
            // Above what a run keeps alive at once (tens of processes),
            // far below what it spawns (hundreds of op commands).
            pid_max: if small_pids { 200 } else { 32_768 },
            grace_ms,
            wait_ms,
            daemon_idle_ms,
            faults,
            window_ms,
            families,
            shim_start_ms,
            max_kernels,
            kernel_idle_ms,
            long_outage,
            flaw,
            fallback,
            channel,
            preempt_permille,
            torn_writes,
            crlf,
            high_pids_first,
            timer_slack_ms,
            interp_start_ms,
            crash_kills,
        }
    }

    /// The daemon may exit by itself within a run.
    pub fn daemon_idles_out(&self) -> bool {
        self.daemon_idle_ms < CLASSIC_IDLE_MS
    }
}

/// The faults on the sandbox's processes ([`Family::PROCESSES`]) a seed
/// adds to its families, each with chance 0.3; drawn after everything
/// else so the rest of an older seed's world stays what it was.
fn draw_process_families(rng: &mut ChaCha8Rng) -> Vec<Family> {
    Family::PROCESSES
        .into_iter()
        .filter(|_| rng.random_bool(0.3))
        .collect()
}

/// The families added after the process faults ([`Family::LATER`]),
/// each with chance 0.3, drawn last for the same reason.
fn draw_later_families(rng: &mut ChaCha8Rng) -> Vec<Family> {
    Family::LATER
        .into_iter()
        .filter(|_| rng.random_bool(0.3))
        .collect()
}

/// Seed `seed`'s two crash points, half the list apart, turning with the
/// seed (from an offset of the scenario's own, so scenarios start apart),
/// each armed at a drawn time of the window.
fn crash_sweep(scenario: &str, seed: u64, window_ms: u64, rng: &mut ChaCha8Rng) -> Vec<Fault> {
    let n = CRASH_POINTS.len() as u64;
    let offset: u64 = scenario.bytes().map(u64::from).sum();
    let first = seed.wrapping_add(offset) % n;
    [first, (first + n / 2) % n]
        .into_iter()
        .map(|i| Fault {
            at_ms: rng.random_range(0..window_ms),
            kind: FaultKind::KillAfterWrite {
                file: CRASH_POINTS[usize::try_from(i).unwrap_or(0)].to_owned(),
            },
        })
        .collect()
}

fn pick(rng: &mut ChaCha8Rng, options: &[u64]) -> u64 {
    options[rng.random_range(0..options.len())]
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&serde_json::to_string(self).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_seeds_of_a_scenario_with_crash_points_kill_after_every_one() {
        let drawn = crate::scenario::by_name("drawn").unwrap();
        let mut met = std::collections::BTreeSet::new();
        for seed in 40..50 {
            let w = World::draw(&drawn, seed, 8);
            assert_eq!(w.crash_kills.len(), 2);
            let schedule = drawn.schedule_in(seed, &w);
            for kill in &w.crash_kills {
                assert!(schedule.0.contains(kill), "seed {seed}: {kill:?} not run");
                assert!(kill.at_ms < w.window_ms);
                if let FaultKind::KillAfterWrite { file } = &kill.kind {
                    met.insert(file.clone());
                }
            }
        }
        assert_eq!(met.len(), CRASH_POINTS.len(), "{met:?}");
        // Every scenario with a kernel has them, whatever its own space;
        // failing open starts no kernel to kill.
        let happy = crate::scenario::by_name("happy").unwrap();
        assert!((0..20).all(|seed| World::draw(&happy, seed, 8).crash_kills.len() == 2));
        let fail_open = crate::scenario::by_name("fail_open").unwrap();
        assert!((0..20).all(|seed| World::draw(&fail_open, seed, 8).crash_kills.is_empty()));
    }

    #[test]
    fn every_setting_is_drawn_both_ways_and_the_same_seed_gives_the_same_world() {
        let s = crate::scenario::by_name("happy").unwrap();
        let worlds: Vec<World> = (0..200).map(|seed| World::draw(&s, seed, 8)).collect();
        for (seed, w) in worlds.iter().enumerate() {
            assert_eq!(*w, World::draw(&s, seed as u64, 8));
            assert!(w.faults <= 8);
        }
        let both =
            |f: &dyn Fn(&World) -> bool| worlds.iter().any(f) && worlds.iter().any(|w| !f(w));
        assert!(both(&|w| w.cgroups));
        assert!(both(&|w| w.bash));
        assert!(both(&|w| w.bounce_keeps_boot_id));
        assert!(both(&|w| w.init_reaps));
        assert!(both(&|w| w.pid_max < 1_000));
        assert!(both(&|w| w.daemon_idles_out()));
        assert!(both(&|w| w.families == s.space.families));
        assert!(worlds.iter().any(|w| w.faults == 0));
        assert!(worlds.iter().any(|w| w.faults == 8));
        for family in Family::PROCESSES
            .into_iter()
            .chain(Family::LATER)
            .chain(Family::LAST)
        {
            assert!(both(&|w| w.families.contains(&family)), "{family:?}");
        }
        assert!(worlds.iter().any(|w| w.max_kernels == 1));
        assert!(worlds.iter().any(|w| w.max_kernels == 2));
        assert!(both(&|w| w.kernel_idle_ms < 5_000));
        assert!(both(&|w| w.long_outage.is_some()));
        assert!(both(&|w| w.channel));
        assert!(both(&|w| w.preempt_permille > 0));
        for family in Family::CHANNEL {
            assert!(both(&|w| w.families.contains(&family)), "{family:?}");
            assert!(
                worlds
                    .iter()
                    .all(|w| w.channel || !w.families.contains(&family)),
                "{family:?} only on the channel"
            );
        }
    }

    #[test]
    fn only_the_fail_open_scenario_draws_a_flawed_sandbox_and_every_flaw_both_ways() {
        let happy = crate::scenario::by_name("happy").unwrap();
        assert!((0..100).all(|seed| {
            let w = World::draw(&happy, seed, 8);
            w.flaw.is_none() && w.fallback
        }));
        let s = crate::scenario::by_name("fail_open").unwrap();
        let worlds: Vec<World> = (0..200).map(|seed| World::draw(&s, seed, 8)).collect();
        for flaw in Flaw::ALL {
            for fallback in [true, false] {
                assert!(
                    worlds
                        .iter()
                        .any(|w| w.flaw == Some(flaw) && w.fallback == fallback),
                    "{flaw:?} fallback {fallback}"
                );
            }
        }
        // A world line of an older seed reads back as before.
        let classic = World::classic(&happy);
        let text = classic.to_string();
        assert!(
            !text.contains("flaw") && !text.contains("fallback") && !text.contains("preempt"),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<World>(&text).unwrap(), classic);
    }

    #[test]
    fn a_scenario_about_an_init_that_never_reaps_keeps_it() {
        let s = crate::scenario::by_name("leftovers_no_init").unwrap();
        assert!((0..100).all(|seed| !World::draw(&s, seed, 8).init_reaps));
    }
}
