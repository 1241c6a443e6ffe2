//! The guest's clocks: a virtual clock unless the plugin declares and the user grants the real
//! one (`docs/architecture.md` §4, "Sandbox rules"). Virtual time starts at every `reset(seed)`
//! (monotonic 0, wall clock 2000-01-01T00:00:00Z) and moves only by the fuel the guest burns
//! ([`VIRTUAL_NS_PER_FUEL`]) and by its own sleeps: a sleep advances virtual time at once and never
//! waits, and a readiness check is answered from virtual time. So no host call blocks on real time,
//! and a guest that counts readiness checks until a timer fires counts the same on every run.
//! Without fuel metering (benchmarks) every reading advances the clock by
//! [`VIRTUAL_NS_PER_READING`] instead.
//!
//! Every WASI 0.2 clock and poll entry point goes through here: `wall-clock.now/resolution`
//! (the WASI context's wall clock is a [`VirtualClock`]), and `monotonic-clock.now/resolution/
//! subscribe-instant/subscribe-duration`, which this module implements and links over
//! wasmtime-wasi's (whose timers sleep on tokio's real clock); the `pollable.ready/block` and
//! `poll` of wasmtime-wasi then drive these timers: a first poll of a timer that is not due
//! registers its deadline and asks to be polled again; a second poll (only `block` and `poll`
//! make one; `ready` polls once) moves the clock to the earliest registered deadline.

use crate::limits::{VIRTUAL_NS_PER_FUEL, VIRTUAL_NS_PER_READING};
use crate::state::HostState;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use wasmtime::component::Resource;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

/// 2000-01-01T00:00:00Z in seconds since the Unix epoch: the virtual wall clock's origin.
const WALL_CLOCK_ORIGIN_SECS: u64 = 946_684_800;

/// The virtual clock of one instance. Cheap to clone (shared by the WASI context, the timers
/// and the store's call hook).
#[derive(Clone)]
pub(crate) struct VirtualClock {
    state: Arc<Mutex<ClockState>>,
    /// Fuel metering is on: time follows fuel, not readings.
    by_fuel: bool,
}

#[derive(Default)]
struct ClockState {
    /// Fuel burnt since the last reset, as of the guest's latest call into the host.
    fuel: u64,
    /// Virtual time slept since the last reset, ns.
    slept_ns: u64,
    /// Readings since the last reset (time source without fuel).
    readings: u64,
    /// Deadlines of the timers a `block` or `poll` waits on now, by timer id.
    waiting: BTreeMap<u64, u64>,
    next_id: u64,
}

impl ClockState {
    fn now_ns(&self) -> u64 {
        self.fuel
            .saturating_mul(VIRTUAL_NS_PER_FUEL)
            .saturating_add(self.slept_ns)
            .saturating_add(self.readings.saturating_mul(VIRTUAL_NS_PER_READING))
    }
}

impl VirtualClock {
    pub(crate) fn new(by_fuel: bool) -> Self {
        Self {
            state: Arc::default(),
            by_fuel,
        }
    }

    fn lock(&self) -> MutexGuard<'_, ClockState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Virtual ns since the last reset; a reading advances the clock when fuel is off.
    pub(crate) fn read_ns(&self) -> u64 {
        let mut s = self.lock();
        if !self.by_fuel {
            s.readings += 1;
        }
        s.now_ns()
    }

    /// Rewind to 0 (every `reset`).
    pub(crate) fn rewind(&self) {
        let mut s = self.lock();
        let next_id = s.next_id;
        *s = ClockState {
            next_id,
            ..ClockState::default()
        };
    }

    /// Record the fuel burnt since the last reset (from the store's call hook).
    pub(crate) fn set_fuel(&self, fuel: u64) {
        self.lock().fuel = fuel;
    }

    /// A sleep until virtual `deadline_ns` (a pollable's state).
    fn timer(&self, deadline_ns: u64) -> VirtualTimer {
        VirtualTimer {
            clock: self.clone(),
            deadline_ns,
        }
    }
}

impl wasmtime_wasi::HostWallClock for VirtualClock {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        Duration::from_secs(WALL_CLOCK_ORIGIN_SECS) + Duration::from_nanos(self.read_ns())
    }
}

/// A `pollable` for a virtual deadline.
struct VirtualTimer {
    clock: VirtualClock,
    deadline_ns: u64,
}

/// One wait of a [`VirtualTimer`] (one `ready`, `block` or `poll`).
struct Wait<'a> {
    timer: &'a VirtualTimer,
    id: Option<u64>,
}

impl Wait<'_> {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.timer.clock.lock();
        if !self.timer.clock.by_fuel {
            s.readings += 1;
        }
        let due = self.timer.deadline_ns;
        if s.now_ns() < due {
            if self.id.is_some() {
                // Polled again: a blocking wait. Sleep to the earliest deadline waited on.
                let earliest = s.waiting.values().copied().min().unwrap_or(due);
                let now = s.now_ns();
                if earliest > now {
                    s.slept_ns = s.slept_ns.saturating_add(earliest - now);
                }
            } else {
                let id = s.next_id;
                s.next_id += 1;
                s.waiting.insert(id, due);
                self.id = Some(id);
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
        }
        if s.now_ns() >= due {
            if let Some(id) = self.id.take() {
                s.waiting.remove(&id);
            }
            Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            self.timer.clock.lock().waiting.remove(&id);
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for VirtualTimer {
    async fn ready(&mut self) {
        let mut wait = Wait {
            timer: self,
            id: None,
        };
        std::future::poll_fn(|cx| wait.poll(cx)).await;
    }
}

/// A `pollable` on the real clock (a granted clock), which never waits past the running call's
/// deadline: the call then traps with `deadline` as soon as the guest runs again.
struct RealTimer {
    until: Instant,
}

#[wasmtime_wasi::async_trait]
impl Pollable for RealTimer {
    async fn ready(&mut self) {
        tokio::time::sleep_until(self.until.into()).await;
    }
}

/// `wasi:clocks/monotonic-clock`, linked over wasmtime-wasi's.
impl monotonic_clock::Host for HostState {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(match &self.clock {
            Some(clock) => clock.read_ns(),
            None => real_ns(self.real_clock_origin),
        })
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Ok(1)
    }

    fn subscribe_instant(
        &mut self,
        when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        match self.clock.clone() {
            Some(clock) => {
                let timer = clock.timer(when);
                let timer = self.table.push(timer)?;
                Ok(subscribe(&mut self.table, timer)?)
            }
            None => {
                let now = real_ns(self.real_clock_origin);
                self.real_timer(Duration::from_nanos(when.saturating_sub(now)))
            }
        }
    }

    fn subscribe_duration(
        &mut self,
        duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        match self.clock.clone() {
            Some(clock) => {
                let timer = clock.timer(clock.read_ns().saturating_add(duration));
                let timer = self.table.push(timer)?;
                Ok(subscribe(&mut self.table, timer)?)
            }
            None => self.real_timer(Duration::from_nanos(duration)),
        }
    }
}

impl HostState {
    fn real_timer(&mut self, duration: Duration) -> wasmtime::Result<Resource<DynPollable>> {
        let now = Instant::now();
        let until = now
            .checked_add(duration)
            .map_or(self.call_ends_at, |t| t.min(self.call_ends_at))
            .max(now);
        let timer = self.table.push(RealTimer { until })?;
        subscribe(&mut self.table, timer)
    }
}

fn real_ns(origin: Instant) -> u64 {
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
