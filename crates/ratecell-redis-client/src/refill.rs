//! The background thread that fetches refills and retries failed grants,
//! so that a check waits on the network only when its node holds no units.

use crate::Shared;
use ratecell::lease::GrantRequest;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A grant to fetch, not before `due`.
pub(crate) struct Job {
    pub req: GrantRequest,
    pub due: Instant,
}

/// What the thread receives.
enum Msg {
    Job(Job),
    Stop,
}

/// The thread and its queue; dropping it stops the thread (queued
/// requests are dropped: their units were never granted), whatever
/// [`Refills`] are still held.
pub(crate) struct Refiller {
    tx: Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

/// A handle that queues jobs for the thread, for a check finished away
/// from its limiter ([`crate::Remote`]). Jobs sent once the thread has
/// stopped are dropped.
#[derive(Clone)]
pub(crate) struct Refills(Sender<Msg>);

impl Refills {
    pub(crate) fn send(&self, job: Job) {
        // An error: the thread has stopped, and the job is moot.
        let _ = self.0.send(Msg::Job(job));
    }
}

impl Refiller {
    pub(crate) fn start(shared: Arc<Shared>) -> Refiller {
        let (tx, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("ratecell-refill".into())
            .spawn(move || run(&shared, &rx))
            .expect("spawning the refill thread");
        Refiller {
            tx,
            thread: Some(thread),
        }
    }

    pub(crate) fn send(&self, job: Job) {
        let _ = self.tx.send(Msg::Job(job));
    }

    pub(crate) fn refills(&self) -> Refills {
        Refills(self.tx.clone())
    }
}

impl Drop for Refiller {
    fn drop(&mut self) {
        // An explicit stop rather than the channel's disconnection: a
        // `Refills` held by an unfinished check must not keep the thread
        // (and this drop, which joins it) waiting.
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, rx: &Receiver<Msg>) {
    let mut queue = Queue::default();
    loop {
        let now = Instant::now();
        while let Some(job) = queue.take_due(now) {
            if let Some(retry) = shared.fetch_in_background(&job.req) {
                queue.push(retry, Instant::now());
            }
        }
        let wait = queue.next_due().map_or(Duration::from_secs(1), |due| {
            due.saturating_duration_since(Instant::now())
        });
        match rx.recv_timeout(wait) {
            Ok(Msg::Job(job)) => queue.push(job, Instant::now()),
            Err(RecvTimeoutError::Timeout) => {}
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Jobs waiting for their time. A retry (a job due later) is queued once
/// per key: every check that failed during an outage asks for one, and one
/// attempt per backoff step is what SPEC §8 asks for.
#[derive(Default)]
struct Queue {
    jobs: Vec<Job>,
    retrying: HashSet<Vec<u8>>,
}

impl Queue {
    fn push(&mut self, job: Job, now: Instant) {
        if job.due > now && !self.retrying.insert(job.req.key().to_vec()) {
            return;
        }
        self.jobs.push(job);
    }

    fn take_due(&mut self, now: Instant) -> Option<Job> {
        let i = self.jobs.iter().position(|j| j.due <= now)?;
        let job = self.jobs.swap_remove(i);
        self.retrying.remove(job.req.key());
        Some(job)
    }

    fn next_due(&self) -> Option<Instant> {
        self.jobs.iter().map(|j| j.due).min()
    }
}
