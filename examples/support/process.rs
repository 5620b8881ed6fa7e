//! What the examples read of their own process from `/proc` (Linux): CPU time and memory.
//! Included by `#[path]` where an example needs it.

/// Fields of `/proc/self/stat` after the command name, in clock ticks of 1/100 s, summed and
/// turned into seconds; 0 where they cannot be read. `indices` count from the state field (the
/// third in `proc(5)`) as 0.
fn stat_seconds(indices: [usize; 2]) -> f64 {
    stat_file_seconds(std::path::Path::new("/proc/self/stat"), indices)
}

/// [`stat_seconds`] of a `stat` file of the same form (a thread's, a process's).
fn stat_file_seconds(path: &std::path::Path, indices: [usize; 2]) -> f64 {
    let stat = std::fs::read_to_string(path).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    indices.into_iter().map(ticks).sum::<f64>() / 100.0
}

/// The process's CPU time so far, user and system, in seconds, to the nanosecond
/// (`CLOCK_PROCESS_CPUTIME_ID`).
#[allow(dead_code)]
pub fn cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// CPU seconds of this process's threads whose name starts with `prefix`
/// (`/proc/self/task/*/comm`, as a runtime's `thread_name` set it): its live threads only, so
/// compare readings taken while the same threads run. Each thread's to the microsecond where
/// the kernel keeps scheduler statistics (`sched`'s `se.sum_exec_runtime`), else in clock
/// ticks of 10 ms (`stat`'s utime and stime), too coarse for a round of a tenth of a second.
#[allow(dead_code)]
pub fn threads_cpu_seconds(prefix: &str) -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with(prefix))
        })
        .map(|t| {
            run_time_seconds(&t.path().join("sched"))
                .unwrap_or_else(|| stat_file_seconds(&t.path().join("stat"), [11, 12]))
        })
        .sum()
}

/// A thread's `se.sum_exec_runtime` (milliseconds, with a fraction) from its `sched` file, in
/// seconds; `None` where the kernel does not keep it.
fn run_time_seconds(sched: &std::path::Path) -> Option<f64> {
    let text = std::fs::read_to_string(sched).ok()?;
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("se.sum_exec_runtime"))?;
    let ms: f64 = line.rsplit(':').next()?.trim().parse().ok()?;
    Some(ms / 1e3)
}

/// CPU seconds, user and system, of this process's children that have been waited for
/// (`/proc/self/stat`'s cutime and cstime, fields 16 and 17); 0 where unreadable.
#[allow(dead_code)]
pub fn children_cpu_seconds() -> f64 {
    stat_seconds([13, 14])
}

/// A `/proc/self/status` field in KiB (`VmRSS`, `RssAnon`, `RssFile`, …); 0 where absent.
#[allow(dead_code)]
pub fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.split(':').next() == Some(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// How many file descriptors the process has open (`/proc/self/fd`); 0 where it cannot be read.
#[allow(dead_code)]
pub fn count_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// How many memory maps the process has (`/proc/self/maps` lines, each counted against
/// `vm.max_map_count`); 0 where it cannot be read.
#[allow(dead_code)]
pub fn count_maps() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

/// The disk a directory tree takes, in KiB: the blocks its files have allocated (a sparse or
/// preallocated file counts what it holds on disk, not its length); 0 where unreadable.
#[allow(dead_code)]
pub fn disk_kib(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut pending = vec![dir.to_path_buf()];
    // Bounded by the tree's entries (symbolic links are not followed).
    while let Some(d) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                pending.push(entry.path());
            }
            total += meta.blocks() * 512;
        }
    }
    total / 1024
}

/// The CPU clients run on where the example was asked to run brokers and clients on cores of
/// their own ([`split_cores`]).
static CLIENT_CORE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Runs brokers and clients on cores of their own, as in a deployment where clients are other
/// machines: every thread of this process so far (the brokers' runtime, its blocking threads,
/// and so every thread they start later) moves to the first CPU the process may use, and
/// clients go to the second ([`pin_client_thread`], [`client_command`]). `Ok(None)` with fewer
/// than two CPUs or without `taskset` (util-linux) to start client processes there.
#[allow(dead_code)]
pub fn split_cores() -> std::io::Result<Option<(usize, usize)>> {
    use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
    let allowed = sched_getaffinity(None)?;
    let mut cpus = (0..CpuSet::MAX_CPU).filter(|c| allowed.is_set(*c));
    let (Some(brokers), Some(clients)) = (cpus.next(), cpus.next()) else {
        return Ok(None);
    };
    if std::process::Command::new("taskset")
        .arg("-V")
        .output()
        .is_err()
    {
        return Ok(None);
    }
    let mut set = CpuSet::new();
    set.set(brokers);
    for task in std::fs::read_dir("/proc/self/task")?.flatten() {
        let tid = task.file_name().to_str().and_then(|t| t.parse().ok());
        let Some(tid) = tid.and_then(rustix::process::Pid::from_raw) else {
            continue;
        };
        match sched_setaffinity(Some(tid), &set) {
            // A thread that ended meanwhile.
            Err(rustix::io::Errno::SRCH) => {}
            other => other?,
        }
    }
    let _ = CLIENT_CORE.set(clients);
    Ok(Some((brokers, clients)))
}

/// Moves the calling thread to the clients' CPU, where [`split_cores`] set one; a runtime's
/// `on_thread_start` for a client's threads.
#[allow(dead_code)]
pub fn pin_client_thread() {
    if let Some(cpu) = CLIENT_CORE.get() {
        let mut set = rustix::thread::CpuSet::new();
        set.set(*cpu);
        // Where it fails, the thread runs where it may: the figures say which cores ran.
        let _ = rustix::thread::sched_setaffinity(None, &set);
    }
}

/// A command running `program`, on the clients' CPU where [`split_cores`] set one.
#[allow(dead_code)]
pub fn client_command(program: &std::path::Path) -> std::process::Command {
    match CLIENT_CORE.get() {
        Some(cpu) => {
            let mut command = std::process::Command::new("taskset");
            command.arg("-c").arg(cpu.to_string()).arg(program);
            command
        }
        None => std::process::Command::new(program),
    }
}
