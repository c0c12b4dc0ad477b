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

/// The thread and its queue; dropping it stops the thread (queued
/// requests are dropped: their units were never granted).
pub(crate) struct Refiller {
    tx: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Refiller {
    pub(crate) fn start(shared: Arc<Shared>) -> Refiller {
        let (tx, rx) = channel();
        let thread = std::thread::Builder::new()
            .name("ratecell-refill".into())
            .spawn(move || run(&shared, &rx))
            .expect("spawning the refill thread");
        Refiller {
            tx: Some(tx),
            thread: Some(thread),
        }
    }

    pub(crate) fn send(&self, job: Job) {
        if let Some(tx) = &self.tx {
            // The thread ends only when this sender is dropped.
            let _ = tx.send(job);
        }
    }
}

impl Drop for Refiller {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, rx: &Receiver<Job>) {
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
            Ok(job) => queue.push(job, Instant::now()),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
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
