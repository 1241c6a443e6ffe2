//! The batching task: one thread owns the model and runs the sampler; requests reach it through
//! a bounded queue.
//!
//! Granularity: the sampler decodes a fixed set of rows to the end (a finished row leaves the
//! batch, no row joins it), so batching is per sampler call, not per decode step as in vLLM's
//! continuous batching. After the first request of a call arrives the thread waits up to
//! `window` for more (up to `max_rows` choices in all); the requests gathered are split into
//! groups of equal [`Sampling`] (temperature, top_p, max_tokens, stop strings), and each group
//! is one sampler call, its prompts sharing prefixes through the [`PrefixCache`]. A request's
//! choice `j` with seed `s` draws from ChaCha8 stream `j` of `s`
//! ([`ragen_gym_policy::RowSeed`]), so what it samples does not depend on the requests batched
//! with it (up to float rounding, as for [`ragen_gym_policy::sample_cached`]).
//!
//! A request whose client went away before its call started (its reply channel closed) is
//! dropped from the call; a call that started runs to its end.

use super::request::Sampling;
use ragen_gym_policy::{Sample, SamplingParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// One request's work: `n` choices of one prompt.
pub struct Job {
    /// The prompt's token ids.
    pub prompt: Vec<u32>,
    /// How to sample.
    pub sampling: Sampling,
    /// Choice `j` draws from stream `j` of this seed.
    pub seed: u64,
    /// Choices.
    pub n: usize,
    /// Where the samples go.
    pub reply: oneshot::Sender<Result<Vec<Sample>, String>>,
}

/// One sampler call: rows (a prompt and its row seed), all sampled with `params`.
pub struct Call<'a> {
    /// The prompts, one per row.
    pub prompts: Vec<Vec<u32>>,
    /// Per row: (seed, stream).
    pub rows: Vec<ragen_gym_policy::RowSeed>,
    /// The call's sampling parameters (its `seed` unused).
    pub params: &'a SamplingParams,
}

/// What the batcher did: calls, rows and dropped requests (shown by `/health`).
#[derive(Debug, Default)]
pub struct Stats {
    /// Sampler calls.
    pub calls: AtomicU64,
    /// Rows sampled.
    pub rows: AtomicU64,
    /// Requests dropped because their client went away before their call.
    pub dropped: AtomicU64,
    /// Most rows in one call.
    pub peak_rows: AtomicU64,
}

/// How the batcher gathers requests.
#[derive(Debug, Clone, Copy)]
pub struct BatchPolicy {
    /// How long to wait for more requests after the first.
    pub window: Duration,
    /// Most choices gathered for one round of calls.
    pub max_rows: usize,
    /// Requests queued at most (more are refused as busy).
    pub queue: usize,
}

/// The handlers' side: submit jobs, read the stats.
#[derive(Clone)]
pub struct Batcher {
    tx: SyncSender<Job>,
    /// What it did so far.
    pub stats: Arc<Stats>,
    queue: usize,
}

/// Why a job was not queued.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The queue is full.
    #[error("the queue of {0} requests is full")]
    Full(usize),
    /// The batching thread has ended.
    #[error("the sampler thread has stopped")]
    Stopped,
}

impl Batcher {
    /// Start the batching thread; `run` samples one call.
    pub fn spawn<F>(policy: BatchPolicy, run: F) -> std::io::Result<Self>
    where
        F: FnMut(Call<'_>) -> Result<Vec<Sample>, String> + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(policy.queue.max(1));
        let stats = Arc::new(Stats::default());
        let s = stats.clone();
        std::thread::Builder::new()
            .name("serve-sampler".into())
            .spawn(move || worker(&rx, policy, &s, run))?;
        Ok(Self {
            tx,
            stats,
            queue: policy.queue,
        })
    }

    /// Queue a job.
    ///
    /// # Errors
    /// [`SubmitError`].
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        self.tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => SubmitError::Full(self.queue),
            TrySendError::Disconnected(_) => SubmitError::Stopped,
        })
    }
}

/// The thread: gather, group, sample, reply; until every sender is gone.
fn worker<F>(rx: &Receiver<Job>, policy: BatchPolicy, stats: &Stats, mut run: F)
where
    F: FnMut(Call<'_>) -> Result<Vec<Sample>, String>,
{
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let mut rows = jobs[0].n;
        let deadline = Instant::now() + policy.window;
        while rows < policy.max_rows {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(j) => {
                    rows += j.n;
                    jobs.push(j);
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
            }
        }
        let before = jobs.len();
        jobs.retain(|j| !j.reply.is_closed());
        stats
            .dropped
            .fetch_add((before - jobs.len()) as u64, Ordering::Relaxed);
        for group in groups(jobs) {
            run_group(group, stats, &mut run);
        }
    }
}

/// Jobs split by equal sampling, in order of first arrival.
fn groups(jobs: Vec<Job>) -> Vec<Vec<Job>> {
    let mut out: Vec<Vec<Job>> = Vec::new();
    for j in jobs {
        match out.iter_mut().find(|g| g[0].sampling == j.sampling) {
            Some(g) => g.push(j),
            None => out.push(vec![j]),
        }
    }
    out
}

/// One sampler call for a group; each job gets its `n` samples (or the call's error). A panic
/// in the sampler is caught and answered as an error, so the thread keeps serving.
fn run_group<F>(group: Vec<Job>, stats: &Stats, run: &mut F)
where
    F: FnMut(Call<'_>) -> Result<Vec<Sample>, String>,
{
    let s = &group[0].sampling;
    let params = SamplingParams {
        temperature: s.temperature,
        top_p: s.top_p,
        top_k: 0,
        max_new_tokens: s.max_tokens,
        stop: s.stop.clone(),
        seed: 0,
    };
    let mut prompts = Vec::new();
    let mut rows = Vec::new();
    for j in &group {
        for stream in 0..j.n as u64 {
            prompts.push(j.prompt.clone());
            rows.push(ragen_gym_policy::RowSeed {
                seed: j.seed,
                stream,
            });
        }
    }
    let n_rows = rows.len() as u64;
    let call = Call {
        prompts,
        rows,
        params: &params,
    };
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(call)))
        .unwrap_or_else(|_| Err("the sampler panicked".into()));
    stats.calls.fetch_add(1, Ordering::Relaxed);
    stats.rows.fetch_add(n_rows, Ordering::Relaxed);
    stats.peak_rows.fetch_max(n_rows, Ordering::Relaxed);
    match out {
        Ok(samples) => {
            let mut samples = samples.into_iter();
            for j in group {
                let mine: Vec<Sample> = samples.by_ref().take(j.n).collect();
                let _ = j.reply.send(Ok(mine));
            }
        }
        Err(e) => {
            for j in group {
                let _ = j.reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_policy::FinishReason;
    use std::sync::Mutex;

    fn sampling(t: f64) -> Sampling {
        Sampling {
            temperature: t,
            top_p: 1.0,
            max_tokens: 4,
            stop: vec![],
        }
    }

    fn job(prompt: u32, t: f64, n: usize) -> (Job, oneshot::Receiver<Result<Vec<Sample>, String>>) {
        let (reply, rx) = oneshot::channel();
        let j = Job {
            prompt: vec![prompt],
            sampling: sampling(t),
            seed: u64::from(prompt),
            n,
            reply,
        };
        (j, rx)
    }

    /// A fake sampler: each row's "sample" is its prompt and (seed, stream).
    fn fake(calls: Arc<Mutex<Vec<usize>>>) -> impl FnMut(Call<'_>) -> Result<Vec<Sample>, String> {
        move |c: Call<'_>| {
            calls.lock().unwrap().push(c.prompts.len());
            Ok(c.prompts
                .iter()
                .zip(&c.rows)
                .map(|(p, r)| Sample {
                    tokens: vec![p[0], r.seed as u32, r.stream as u32],
                    logprobs: vec![],
                    kinds: vec![],
                    text: String::new(),
                    finish_reason: FinishReason::Length,
                })
                .collect())
        }
    }

    #[test]
    fn requests_in_the_window_share_a_call_per_sampling_and_gone_clients_are_dropped() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let policy = BatchPolicy {
            window: Duration::from_millis(300),
            max_rows: 64,
            queue: 16,
        };
        let b = Batcher::spawn(policy, fake(calls.clone())).unwrap();
        let (j1, r1) = job(1, 0.0, 2);
        let (j2, r2) = job(2, 0.0, 1);
        let (j3, r3) = job(3, 0.7, 1);
        let (j4, r4) = job(4, 0.0, 1);
        drop(r4); // its client went away
        for j in [j1, j2, j3, j4] {
            b.submit(j).unwrap();
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let got =
            |r: oneshot::Receiver<Result<Vec<Sample>, String>>| rt.block_on(r).unwrap().unwrap();
        let s1: Vec<Sample> = got(r1);
        assert_eq!(
            s1.iter().map(|s| s.tokens.clone()).collect::<Vec<_>>(),
            vec![vec![1, 1, 0], vec![1, 1, 1]]
        );
        assert_eq!(got(r2)[0].tokens, vec![2, 2, 0]);
        assert_eq!(got(r3)[0].tokens, vec![3, 3, 0]);
        // greedy rows of jobs 1 and 2 in one call, the sampled job in another
        assert_eq!(*calls.lock().unwrap(), vec![3, 1]);
        assert_eq!(b.stats.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(b.stats.peak_rows.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_full_queue_is_refused_and_a_panicking_sampler_answers_an_error() {
        let policy = BatchPolicy {
            window: Duration::ZERO,
            max_rows: 1,
            queue: 1,
        };
        let b = Batcher::spawn(policy, |_c: Call<'_>| -> Result<Vec<Sample>, String> {
            std::thread::sleep(Duration::from_millis(200));
            panic!("boom")
        })
        .unwrap();
        let (j1, r1) = job(1, 0.0, 1);
        b.submit(j1).unwrap();
        std::thread::sleep(Duration::from_millis(50)); // the thread took j1
        let (j2, _r2) = job(2, 0.0, 1);
        b.submit(j2).unwrap();
        let (j3, _r3) = job(3, 0.0, 1);
        assert!(matches!(b.submit(j3), Err(SubmitError::Full(1))));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(
            rt.block_on(r1).unwrap().unwrap_err(),
            "the sampler panicked"
        );
    }
}
