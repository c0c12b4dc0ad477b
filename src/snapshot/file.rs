//! Snapshots in files: the atomic write, and [`Persisted`], a limiter
//! restored from its file at start and saved to it periodically.

use super::SnapshotError;
use crate::keyed::KeyedLimiter;
use crate::limiter::Limiter;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Writes a file so that, whatever happens during the call (a crash, a
/// full disk, a kill), `path` holds either its previous contents or the
/// whole new ones: the bytes go to a temporary file in the same directory
/// (the rename must not cross file systems), which is flushed to the disk,
/// renamed over `path`, and the directory flushed so the rename itself
/// survives a power loss. On failure the temporary file is removed.
pub(crate) fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut File) -> Result<(), SnapshotError>,
) -> Result<(), SnapshotError> {
    static UNIQUE: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "the snapshot path names no file",
        )
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // Unique per process and call: two saves at once (the periodic saver
    // and a caller) each write their own file; the last rename wins.
    let temp = dir.join(format!(
        ".{}.{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        UNIQUE.fetch_add(1, Ordering::Relaxed)
    ));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)?;
    let written = write(&mut file)
        .and_then(|()| Ok(file.sync_all()?))
        .and_then(|()| Ok(fs::rename(&temp, path)?));
    if written.is_err() {
        let _ = fs::remove_file(&temp);
        return written;
    }
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    Ok(())
}

impl Limiter {
    /// Saves a snapshot to `path` atomically: a crash during the call
    /// leaves the previous file whole.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), SnapshotError> {
        write_atomically(path.as_ref(), |file| self.snapshot(file))
    }

    /// [`Limiter::save`] judging which states are live at `now_ns` (see
    /// [`Limiter::snapshot_at`]): for limiters whose requests carry their
    /// own time ([`Request::at`](crate::Request::at)).
    pub fn save_at(&self, path: impl AsRef<Path>, now_ns: u64) -> Result<(), SnapshotError> {
        write_atomically(path.as_ref(), |file| self.snapshot_at(file, now_ns))
    }
}

impl KeyedLimiter {
    /// Saves a snapshot to `path` atomically: a crash during the call
    /// leaves the previous file whole.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), SnapshotError> {
        write_atomically(path.as_ref(), |file| self.snapshot(file))
    }

    /// [`KeyedLimiter::save`] judging which states are live at `now_ns` (see
    /// [`KeyedLimiter::snapshot_at`]): for limiters whose requests carry
    /// their own time ([`Request::at`](crate::Request::at)).
    pub fn save_at(&self, path: impl AsRef<Path>, now_ns: u64) -> Result<(), SnapshotError> {
        write_atomically(path.as_ref(), |file| self.snapshot_at(file, now_ns))
    }
}

/// A limiter that can be saved to a file (what [`Persisted`] needs to run).
pub trait Save: Send + Sync + 'static {
    /// Saves a snapshot to `path` atomically.
    fn save_to(&self, path: &Path) -> Result<(), SnapshotError>;
}

impl Save for Limiter {
    fn save_to(&self, path: &Path) -> Result<(), SnapshotError> {
        self.save(path)
    }
}

impl Save for KeyedLimiter {
    fn save_to(&self, path: &Path) -> Result<(), SnapshotError> {
        self.save(path)
    }
}

/// A limiter whose states survive a restart: at start it is restored from
/// its file when the file exists, and a background thread saves it there
/// every period (atomically, so a crash leaves the last whole snapshot).
/// Dropping it stops and joins the thread and saves once more;
/// [`Persisted::close`] does the same and returns that save's result.
/// Dereferences to the limiter. Made by [`crate::Builder::persisted`]
/// (every option of a limiter: several limits, tiers, a clock, names).
///
/// ```
/// use ratecell::{Algorithm, Config, KeyedLimiter};
/// use std::time::Duration;
///
/// # let dir = std::env::temp_dir().join(format!("ratecell-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// # let path = dir.join("limits.snap");
/// let config = Config::new(Algorithm::Gcra, 10, 1_000_000_000).capacity(10_000);
/// let limiter = KeyedLimiter::builder()
///     .limit(config)
///     .persisted(&path, Duration::from_secs(5))
///     .build()?;
/// assert!(limiter.check(42, 1).allowed);
/// # drop(limiter);
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), ratecell::SnapshotError>(())
/// ```
pub struct Persisted<L: Save> {
    limiter: Arc<L>,
    path: PathBuf,
    // Behind a lock so that `stop_saving` can take it through `&self`
    // (the C ABI's handle is shared): taken once, by the first stop.
    saver: Mutex<Option<JoinHandle<()>>>,
    shared: Arc<Shared>,
}

/// What the saving thread shares with its owner.
struct Shared {
    stop: Mutex<bool>,
    wake: Condvar,
    last_error: Mutex<Option<SnapshotError>>,
}

impl<L: Save> Persisted<L> {
    /// Every way to open a persisted limiter ([`crate::Builder::persisted`]
    /// calls it): the limiter `load` restores from `path` if the file
    /// exists, else the one `build` makes, saved every `every` from now on.
    /// Only a missing file means "start fresh": any other failure to
    /// restore (a damaged file, another configuration) is returned, so
    /// nothing saved is silently dropped.
    pub(crate) fn open_or_build<B>(
        path: &Path,
        every: Duration,
        load: impl FnOnce(&Path) -> Result<L, SnapshotError>,
        build: impl FnOnce() -> Result<L, B>,
    ) -> Result<Self, SnapshotError>
    where
        SnapshotError: From<B>,
    {
        let limiter = match load(path) {
            Ok(limiter) => limiter,
            Err(SnapshotError::Io(e)) if e.kind() == io::ErrorKind::NotFound => build()?,
            Err(e) => return Err(e),
        };
        Persisted::start(limiter, path, every)
    }

    /// Saves `limiter` to `path` every `every` (at least 1 ms) from now on,
    /// on a background thread.
    fn start(limiter: L, path: impl AsRef<Path>, every: Duration) -> Result<Self, SnapshotError> {
        let path = path.as_ref().to_path_buf();
        let limiter = Arc::new(limiter);
        let shared = Arc::new(Shared {
            stop: Mutex::new(false),
            wake: Condvar::new(),
            last_error: Mutex::new(None),
        });
        let every = every.max(Duration::from_millis(1));
        let saver = {
            let (limiter, shared, path) = (limiter.clone(), shared.clone(), path.clone());
            std::thread::Builder::new()
                .name("ratecell-snapshot".into())
                .spawn(move || {
                    let mut stop = shared
                        .stop
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    loop {
                        // Checked before each wait: a stop signalled before
                        // the thread first waited must not be slept through.
                        if *stop {
                            return;
                        }
                        stop = shared
                            .wake
                            .wait_timeout(stop, every)
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .0;
                        if *stop {
                            return;
                        }
                        if let Err(e) = limiter.save_to(&path) {
                            *shared
                                .last_error
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(e);
                        }
                    }
                })?
        };
        Ok(Persisted {
            limiter,
            path,
            saver: Mutex::new(Some(saver)),
            shared,
        })
    }

    /// The limiter, shareable with other threads.
    pub fn limiter(&self) -> &Arc<L> {
        &self.limiter
    }

    /// The file it is saved to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Saves now, in the calling thread.
    pub fn save_now(&self) -> Result<(), SnapshotError> {
        self.limiter.save_to(&self.path)
    }

    /// The error of the last periodic save that failed, if any since the
    /// last call (a periodic save has nobody else to report to).
    pub fn take_error(&self) -> Option<SnapshotError> {
        self.shared
            .last_error
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Stops the periodic saves and saves a last time, returning that
    /// save's result (dropping does the same and drops the result).
    pub fn close(self) -> Result<(), SnapshotError> {
        self.stop_saving()
    }

    /// [`Persisted::close`] keeping the limiter: stops the periodic saves
    /// (joining the thread) and saves a last time, returning that save's
    /// result; the limiter goes on checking, unsaved. Later calls, and the
    /// drop, save nothing more and return `Ok`. For an owner that must
    /// learn the last save's result before it can drop the limiter (the C
    /// ABI's `ratecell_snapshot_stop`).
    pub fn stop_saving(&self) -> Result<(), SnapshotError> {
        let Some(saver) = self
            .saver
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        else {
            return Ok(());
        };
        *self
            .shared
            .stop
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.shared.wake.notify_all();
        let _ = saver.join();
        self.save_now()
    }
}

impl<L: Save> Deref for Persisted<L> {
    type Target = L;
    fn deref(&self) -> &L {
        &self.limiter
    }
}

impl<L: Save> Drop for Persisted<L> {
    fn drop(&mut self) {
        let _ = self.stop_saving();
    }
}

impl<L: Save + std::fmt::Debug> std::fmt::Debug for Persisted<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persisted")
            .field("limiter", &self.limiter)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
