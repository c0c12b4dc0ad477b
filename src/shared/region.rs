//! The region file on Linux: its header, its creation under a temporary
//! name and `link`, and its checked attachment (see the parent module).

use super::{SharedError, SharedErrorKind, SharedOptions, StoredConfig, VERSION};
use crate::clock::shared::Calibration;
use crate::config::{Config, Error};
use crate::sync::SlotU128;
use crate::table::Shard;
use crate::table::storage::Storage;
use crossbeam_utils::CachePadded;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: [u8; 8] = *b"ratecell";
const PAGE: usize = 4096;

/// The first bytes of a region. Plain integers only, `repr(C)`: every
/// process, whatever language loaded the library, reads the same bytes.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Header {
    magic: [u8; 8],
    version: u32,
    #[allow(
        clippy::struct_field_names,
        reason = "the header's own length, as the region format names it"
    )]
    header_bytes: u32,
    total_bytes: u64,
    /// `/proc/sys/kernel/random/boot_id` when made.
    boot_id: [u8; 16],
    /// The inode of the creator's pid namespace: pids recorded by latches
    /// mean something only inside it.
    pid_namespace: u64,
    config: StoredConfig,
    hash_k0: u64,
    hash_k1: u64,
    clock_base_raw: u64,
    clock_base_unix_ns: u64,
    clock_mult: u64,
    shards_offset: u64,
    shards: u64,
    slots_offset: u64,
    slots: u64,
    /// FNV-1a of every byte above.
    checksum: u64,
}

const _: () = assert!(size_of::<Header>() <= PAGE);

impl Header {
    fn bytes(&self) -> &[u8] {
        // SAFETY: Header is repr(C) of integers and byte arrays with no
        // padding (asserted by the test `the_header_has_no_padding`), so every byte is
        // initialised.
        unsafe { std::slice::from_raw_parts(std::ptr::from_ref(self).cast(), size_of::<Header>()) }
    }

    fn compute_checksum(&self) -> u64 {
        let body = &self.bytes()[..size_of::<Header>() - 8];
        body.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    }
}

/// Where the table's parts lie in a region of `shards` and `slots`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Layout {
    shards_offset: usize,
    slots_offset: usize,
    total: usize,
}

impl Layout {
    fn of(shards: usize, slots: usize) -> Option<Layout> {
        let shards_offset = PAGE;
        let shards_end =
            shards_offset.checked_add(shards.checked_mul(size_of::<CachePadded<Shard>>())?)?;
        let slots_offset = shards_end.checked_next_multiple_of(PAGE)?;
        let total = slots_offset
            .checked_add(slots.checked_mul(size_of::<SlotU128>())?)?
            .checked_next_multiple_of(PAGE)?;
        Some(Layout {
            shards_offset,
            slots_offset,
            total,
        })
    }
}

/// A mapping of a whole region, unmapped when the last table part that
/// points into it is dropped.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory, accessed only through atomics.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing points
        // into the mapping any more (its Storages hold this Arc).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// What attaching gives the limiter: the table's parts, the hash key and
/// the clock.
pub(crate) struct Attached {
    pub shards: Storage<CachePadded<Shard>>,
    pub slots: Storage<SlotU128>,
    pub hash_keys: (u64, u64),
    pub calibration: Calibration,
}

/// An open file descriptor, closed on drop.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: we own the descriptor.
        unsafe { libc::close(self.0) };
    }
}

fn c_path(path: &Path) -> Result<CString, Error> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        shared_error(
            path,
            SharedErrorKind::Io,
            "the path contains a NUL byte".into(),
        )
    })
}

fn shared_error(path: &Path, kind: SharedErrorKind, message: String) -> Error {
    Error::Shared(SharedError {
        kind,
        path: path.to_path_buf(),
        message,
    })
}

fn io_error(path: &Path, what: &str) -> Error {
    let os = std::io::Error::last_os_error();
    shared_error(path, SharedErrorKind::Io, format!("{what}: {os}"))
}

/// Creates or attaches the region at `path` for a table of `shards` shards
/// and `slots` slots.
pub(crate) fn attach(
    path: &Path,
    config: &Config,
    options: &SharedOptions,
    hash_keys: Option<(u64, u64)>,
    shards: usize,
    slots: usize,
) -> Result<Attached, Error> {
    let stored = StoredConfig::of(config)?;
    let layout = Layout::of(shards, slots).ok_or(Error::OutOfMemory { bytes: usize::MAX })?;
    let cpath = c_path(path)?;
    // Three rounds: open fails (absent), our link fails (someone else
    // created it meanwhile), then open finds theirs. A file that keeps
    // appearing and vanishing (someone removing it in a loop) ends here.
    for _ in 0..3 {
        // SAFETY: a valid C string; flags and no mode (no O_CREAT).
        let fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd >= 0 {
            return attach_fd(path, Fd(fd), &stored, shards, slots, layout);
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOENT) {
            return Err(io_error(path, "cannot open"));
        }
        if let Some(attached) = create(
            path, &cpath, &stored, options, hash_keys, shards, slots, layout,
        )? {
            return Ok(attached);
        }
    }
    Err(shared_error(
        path,
        SharedErrorKind::Io,
        "the file kept appearing and disappearing while it was being opened".into(),
    ))
}

/// Maps `len` bytes of `fd` shared, read-write.
fn map(path: &Path, fd: &Fd, len: usize) -> Result<Arc<Mapping>, Error> {
    // SAFETY: a fresh mapping chosen by the kernel; fd is open read-write.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.0,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io_error(path, "cannot map"));
    }
    // A large table misses the TLB on nearly every check with 4 KiB pages
    // (see `memory::advise_huge_pages`). A file on tmpfs gets huge pages only
    // as its mount allows (`huge=advise`, which this advice satisfies, or
    // `huge=within_size`/`always`; /dev/shm mounts with `huge=never` unless
    // the system says otherwise; `shmem_enabled` in sysfs governs only
    // memfd and SysV memory); advice only, ignored elsewhere. `reserve`
    // faults the pages in after it.
    // SAFETY: the range is exactly the mapping just made.
    unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
    Ok(Arc::new(Mapping {
        ptr: ptr.cast(),
        len,
    }))
}

/// Reserves every page of a new region now: on tmpfs a page that cannot be
/// had later would be a SIGBUS in the middle of a check. The pages are
/// faulted in through the mapping, after `map` asked for huge pages, so a
/// tmpfs mounted with `huge=advise` backs the table with them;
/// `posix_fallocate` would allocate them from the file, where that advice
/// does not reach. Kernels before 5.14 (no `MADV_POPULATE_WRITE`) fall back
/// to it.
fn reserve(path: &Path, fd: &Fd, map: &Mapping, len: libc::off_t) -> Result<(), Error> {
    // The UAPI value (linux/mman.h); the libc crate does not name it.
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    let out_of_space = || Error::OutOfMemory { bytes: map.len };
    // SAFETY: the range is exactly the mapping, read-write and shared;
    // POPULATE_WRITE faults its pages in without changing their contents.
    if unsafe { libc::madvise(map.ptr.cast(), map.len, MADV_POPULATE_WRITE) } == 0 {
        return Ok(());
    }
    match std::io::Error::last_os_error().raw_os_error() {
        // A page the file system cannot supply (tmpfs full: the fault
        // would be a SIGBUS) or memory the kernel cannot find.
        Some(libc::EFAULT | libc::ENOMEM) => return Err(out_of_space()),
        Some(libc::EINVAL) => {}
        _ => return Err(io_error(path, "cannot reserve the region's pages")),
    }
    // SAFETY: fd is ours, open for writing.
    let err = unsafe { libc::posix_fallocate(fd.0, 0, len) };
    if err == 0 {
        return Ok(());
    }
    let os = std::io::Error::from_raw_os_error(err);
    Err(match err {
        libc::ENOSPC => out_of_space(),
        _ => shared_error(
            path,
            SharedErrorKind::Io,
            format!("cannot size the region to {} bytes: {os}", map.len),
        ),
    })
}

/// The table's parts inside a mapping.
fn parts(map: &Arc<Mapping>, layout: Layout, shards: usize, slots: usize) -> Attached {
    let keep: Arc<dyn Send + Sync> = map.clone();
    // SAFETY: the layout puts `shards` 128-byte-aligned shards and `slots`
    // 16-byte slots inside the mapping (page-aligned offsets, len checked
    // by the caller); all-zero bytes are valid for both, and anything
    // else there is still a valid integer; the Arc keeps the mapping.
    unsafe {
        Attached {
            shards: Storage::mapped(
                map.ptr.add(layout.shards_offset).cast(),
                shards,
                keep.clone(),
            ),
            slots: Storage::mapped(map.ptr.add(layout.slots_offset).cast(), slots, keep),
            hash_keys: (0, 0),
            calibration: Calibration {
                base_raw: 0,
                base_unix_ns: 0,
                mult: 0,
            },
        }
    }
}

/// Builds a complete region under a temporary name and links it to
/// `path`. `None`: `path` appeared meanwhile (attach to it instead).
#[allow(clippy::too_many_arguments)]
fn create(
    path: &Path,
    cpath: &CString,
    stored: &StoredConfig,
    options: &SharedOptions,
    hash_keys: Option<(u64, u64)>,
    shards: usize,
    slots: usize,
    layout: Layout,
) -> Result<Option<Attached>, Error> {
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        SEQUENCE.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = Path::new(&tmp);
    let ctmp = c_path(tmp)?;
    let mode = options.mode & 0o7777;
    // SAFETY: a valid C string; O_EXCL: a name nobody else uses.
    let fd = unsafe {
        libc::open(
            ctmp.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(io_error(path, "cannot create"));
    }
    let fd = Fd(fd);
    let result =
        build(path, &fd, stored, mode, hash_keys, shards, slots, layout).and_then(|attached| {
            // SAFETY: valid C strings.
            if unsafe { libc::link(ctmp.as_ptr(), cpath.as_ptr()) } == 0 {
                Ok(Some(attached))
            } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::EEXIST) {
                Ok(None)
            } else {
                Err(io_error(path, "cannot link the new region into place"))
            }
        });
    // SAFETY: a valid C string; the temporary name is ours alone.
    unsafe { libc::unlink(ctmp.as_ptr()) };
    result
}

/// Sizes, maps and initialises a new region file.
#[allow(clippy::too_many_arguments)]
fn build(
    path: &Path,
    fd: &Fd,
    stored: &StoredConfig,
    mode: u32,
    hash_keys: Option<(u64, u64)>,
    shards: usize,
    slots: usize,
    layout: Layout,
) -> Result<Attached, Error> {
    // SAFETY: fd is ours; exactly the mode asked for, whatever the umask.
    if unsafe { libc::fchmod(fd.0, mode as libc::mode_t) } != 0 {
        return Err(io_error(path, "cannot set the mode"));
    }
    let len = libc::off_t::try_from(layout.total).map_err(|_| Error::OutOfMemory {
        bytes: layout.total,
    })?;
    // SAFETY: fd is ours, open for writing.
    if unsafe { libc::ftruncate(fd.0, len) } != 0 {
        return Err(io_error(path, "cannot size the region"));
    }
    let map = map(path, fd, layout.total)?;
    reserve(path, fd, &map, len)?;
    // A restored snapshot's keys (its keys' places depend on them), else
    // fresh random ones.
    let (k0, k1) = hash_keys.unwrap_or_else(|| crate::table::KeyHasher::random().keys());
    let cal = Calibration::measure(&quanta::Clock::new());
    let mut header = Header {
        magic: MAGIC,
        version: VERSION,
        header_bytes: size_of::<Header>() as u32,
        total_bytes: layout.total as u64,
        boot_id: boot_id(),
        pid_namespace: pid_namespace(),
        config: *stored,
        hash_k0: k0,
        hash_k1: k1,
        clock_base_raw: cal.base_raw,
        clock_base_unix_ns: cal.base_unix_ns,
        clock_mult: cal.mult,
        shards_offset: layout.shards_offset as u64,
        shards: shards as u64,
        slots_offset: layout.slots_offset as u64,
        slots: slots as u64,
        checksum: 0,
    };
    header.checksum = header.compute_checksum();
    // SAFETY: the mapping is at least a page long and page-aligned; no
    // other process can see this file yet (it is not linked to `path`).
    #[allow(clippy::cast_ptr_alignment, reason = "a mapping is page-aligned")]
    unsafe {
        map.ptr.cast::<Header>().write(header);
    }
    let mut attached = parts(&map, layout, shards, slots);
    attached.hash_keys = (k0, k1);
    attached.calibration = cal;
    Ok(attached)
}

/// Checks an existing region's header against ours, then maps it.
#[allow(
    clippy::needless_pass_by_value,
    reason = "the descriptor is attach's to close: dropped when the attach is done, mapped or not"
)]
fn attach_fd(
    path: &Path,
    fd: Fd,
    stored: &StoredConfig,
    shards: usize,
    slots: usize,
    layout: Layout,
) -> Result<Attached, Error> {
    let fail = |kind, message: String| Err(shared_error(path, kind, message));
    // SAFETY: an all-zero stat is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fd is open; st is writable.
    if unsafe { libc::fstat(fd.0, &raw mut st) } != 0 {
        return Err(io_error(path, "cannot stat"));
    }
    let size = u64::try_from(st.st_size).unwrap_or(0);
    if size < PAGE as u64 {
        return fail(
            SharedErrorKind::Truncated,
            format!("the file is {size} bytes, shorter than a region's {PAGE}-byte header page"),
        );
    }
    let mut raw = [0u8; size_of::<Header>()];
    // SAFETY: fd is open; raw is writable for its length.
    let got = unsafe { libc::pread(fd.0, raw.as_mut_ptr().cast(), raw.len(), 0) };
    if usize::try_from(got) != Ok(raw.len()) {
        return Err(io_error(path, "cannot read the header"));
    }
    // SAFETY: Header is plain integers and byte arrays: any bytes are a
    // valid value; read_unaligned because the buffer is a byte array.
    let header: Header = unsafe { raw.as_ptr().cast::<Header>().read_unaligned() };
    if header.magic != MAGIC {
        return fail(
            SharedErrorKind::NotARegion,
            "the file does not start with a ratecell region header".into(),
        );
    }
    if header.version != VERSION {
        return fail(
            SharedErrorKind::Version,
            format!(
                "the region has layout version {}, this library reads version {VERSION}",
                header.version
            ),
        );
    }
    if header.header_bytes as usize != size_of::<Header>()
        || header.checksum != header.compute_checksum()
    {
        return fail(
            SharedErrorKind::NotARegion,
            "the region's header is damaged (its checksum does not match)".into(),
        );
    }
    if header.total_bytes > size {
        return fail(
            SharedErrorKind::Truncated,
            format!(
                "the file is {size} bytes, the region's header says {}",
                header.total_bytes
            ),
        );
    }
    if header.boot_id != boot_id() {
        return fail(
            SharedErrorKind::Stale,
            "the region was made before the machine last booted; remove the file (no process can be using it)".into(),
        );
    }
    if header.pid_namespace != pid_namespace() {
        return fail(
            SharedErrorKind::Unsupported,
            "the region was made in another pid namespace (another container): the pids its latches record mean nothing here".into(),
        );
    }
    if let Some(difference) = header.config.first_difference(stored) {
        return fail(SharedErrorKind::ConfigMismatch, difference);
    }
    let ours = (
        layout.shards_offset as u64,
        shards as u64,
        layout.slots_offset as u64,
        slots as u64,
        layout.total as u64,
    );
    let theirs = (
        header.shards_offset,
        header.shards,
        header.slots_offset,
        header.slots,
        header.total_bytes,
    );
    if ours != theirs {
        return fail(
            SharedErrorKind::NotARegion,
            format!(
                "the region's table layout {theirs:?} is not the one its configuration gives {ours:?}"
            ),
        );
    }
    let map = map(path, &fd, layout.total)?;
    let mut attached = parts(&map, layout, shards, slots);
    attached.hash_keys = (header.hash_k0, header.hash_k1);
    attached.calibration = Calibration {
        base_raw: header.clock_base_raw,
        base_unix_ns: header.clock_base_unix_ns,
        mult: header.clock_mult,
    };
    Ok(attached)
}

/// This boot's id (zeros where the kernel does not say).
fn boot_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    if let Ok(text) = std::fs::read_to_string("/proc/sys/kernel/random/boot_id") {
        let hex: Vec<u8> = text
            .bytes()
            .filter(u8::is_ascii_hexdigit)
            .map(|c| (c as char).to_digit(16).unwrap_or(0) as u8)
            .collect();
        for (i, pair) in hex.chunks(2).take(16).enumerate() {
            id[i] = pair.iter().fold(0, |a, &d| (a << 4) | d);
        }
    }
    id
}

/// The inode of this process's pid namespace (0 where the kernel does not
/// say).
fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_has_no_padding() {
        let fields = 8 + 4 + 4 + 8 + 16 + 8 + size_of::<StoredConfig>() + 10 * 8;
        assert_eq!(size_of::<Header>(), fields);
        assert_eq!(size_of::<StoredConfig>(), 4 + 4 + 5 * 8);
    }

    #[test]
    fn the_boot_id_is_read() {
        assert_ne!(boot_id(), [0; 16]);
    }
}
