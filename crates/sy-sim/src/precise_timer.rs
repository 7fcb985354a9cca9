//! Sub-millisecond waits for engine steps and injected delays.
//!
//! tokio's timer wheel has a 1 ms resolution and fires on the runtime driver's next tick, so
//! `sleep_until(t)` ends anywhere from 0 to about 1.5 ms after `t`. For engine steps that made
//! every simulated TTFT about a millisecond longer than the step-time model says (measured
//! against a real Dynamo run: 7.4 ms simulated for a 6.1 ms model prefill), and the injected
//! first-token delay (`faults.stall_ms`) is the reference the collector's overhead benchmark
//! measures TTFT against: a millisecond of timer error in the simulator would be reported as
//! collector overhead.
//!
//! One process-wide thread keeps the pending deadlines in a heap and waits on its channel with
//! a timeout until the earliest one (a futex wait with a nanosecond timeout: tens of
//! microseconds of slack on Linux), then completes that deadline's oneshot, which wakes the
//! waiting task on whatever runtime it runs. If the thread cannot be started the wait falls
//! back to tokio's timer.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Instant;

use tokio::sync::oneshot;

/// A deadline and the oneshot to complete at it.
struct Pending {
    at: Instant,
    seq: u64,
    done: oneshot::Sender<()>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest deadline first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

type Request = (Instant, oneshot::Sender<()>);

/// The channel to the timer thread, started on first use (`None` if it could not start).
fn timer() -> Option<&'static mpsc::Sender<Request>> {
    static TIMER: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();
    TIMER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Request>();
            std::thread::Builder::new()
                .name("sy-sim-timer".into())
                .spawn(move || {
                    exact_timeouts();
                    run(&rx)
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Asks Linux to end this thread's timed waits on time. A thread's timer slack (50 µs by
/// default) lets the kernel end a timed wait that much late to batch wake-ups; with it the
/// waits of 150–330 µs ended a median 95–115 µs after their deadline on the idle 2-core
/// machine (40–50 µs with 1 ns: the rest is the hand-over to the waiting task), which a fitted
/// `frontend_untimed_ms` of a few microseconds turned into a tenth of a millisecond more client
/// TTFT than the fit assumed. Elsewhere the slack is left as it is.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn exact_timeouts() {
    // SAFETY: PR_SET_TIMERSLACK sets a scheduling parameter of the calling thread only; it
    // reads and writes none of our memory, and 1 ns is a valid slack.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

#[cfg(not(target_os = "linux"))]
fn exact_timeouts() {}

fn run(rx: &mpsc::Receiver<Request>) {
    let mut heap = BinaryHeap::<Pending>::new();
    let mut seq = 0_u64;
    loop {
        let now = Instant::now();
        while heap.peek().is_some_and(|p| p.at <= now) {
            if let Some(p) = heap.pop() {
                let _ = p.done.send(()); // the waiter may have gone away
            }
        }
        let next = match heap.peek() {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(p) => rx.recv_timeout(p.at.saturating_duration_since(now)),
        };
        match next {
            Ok((at, done)) => {
                seq += 1;
                heap.push(Pending { at, seq, done });
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Waits until `at` with sub-millisecond precision (see the module docs).
pub(crate) async fn sleep_until(at: Instant) {
    if at <= Instant::now() {
        return;
    }
    let (done, wait) = oneshot::channel();
    let sent = timer().is_some_and(|tx| tx.send((at, done)).is_ok());
    if !sent || wait.await.is_err() {
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "current_thread")]
    async fn never_wakes_before_the_deadline() {
        // Precision is measured by the overhead benchmark (crates/sy-collect/benches), not here.
        for k in 0..20 {
            let at = Instant::now() + Duration::from_micros(2_000 + 137 * k);
            sleep_until(at).await;
            assert!(Instant::now() >= at, "woke before the deadline");
        }
    }

    /// What the timer thread calls first leaves its thread with 1 ns of timer slack, and no
    /// other thread's (the test's own keeps its default).
    #[cfg(target_os = "linux")]
    #[test]
    #[allow(unsafe_code)]
    fn exact_timeouts_sets_the_calling_threads_slack_to_1_ns() {
        // SAFETY: PR_GET_TIMERSLACK reads the calling thread's slack; no memory of ours.
        let slack = || unsafe { libc::prctl(libc::PR_GET_TIMERSLACK) };
        let before = slack();
        let in_thread = std::thread::spawn(move || {
            exact_timeouts();
            slack()
        })
        .join()
        .unwrap();
        assert_eq!(in_thread, 1);
        assert_eq!(slack(), before);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_waiters_wake_in_deadline_order() {
        let start = Instant::now() + Duration::from_millis(5);
        let mut tasks = Vec::new();
        for k in (0..50_u64).rev() {
            let at = start + Duration::from_micros(200 * k);
            tasks.push(tokio::spawn(async move {
                sleep_until(at).await;
                (k, Instant::now() >= at)
            }));
        }
        for t in tasks {
            let (k, on_time) = t.await.unwrap();
            assert!(on_time, "waiter {k} woke early");
        }
        // Past deadlines return at once.
        let t = Instant::now();
        sleep_until(t - Duration::from_millis(1)).await;
        assert!(t.elapsed() < Duration::from_millis(50));
    }
}
