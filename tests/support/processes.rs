//! Brokers as `replog node` processes, and the `replog` command line.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A `replog node` process: SIGKILLed when dropped (continued first if it was stopped), so a
/// failed test leaves no broker behind.
pub struct Broker {
    pub child: Child,
    /// Whether the process was last sent SIGSTOP.
    pub stopped: bool,
}

impl From<Child> for Broker {
    fn from(child: Child) -> Broker {
        Broker {
            child,
            stopped: false,
        }
    }
}

impl Broker {
    /// Starts `replog node` `id` of the cluster whose brokers listen at `addrs` (broker `i`
    /// at `addrs[i - 1]`), with a 500 ms election timeout (unless `more` sets one), its data
    /// under `dir/proc-{id}`, and `more` arguments (topics, other listeners, `--join`).
    pub fn spawn(id: u64, addrs: &[SocketAddr], dir: &Path, more: &[&str]) -> Broker {
        Broker::spawn_named(id, addrs, dir, more, None)
    }

    /// [`spawn`](Self::spawn) with every broker named `host` in `--listen` and `--peer`
    /// (`host:PORT`, the ports of `addrs`), when `host` is given.
    pub fn spawn_named(
        id: u64,
        addrs: &[SocketAddr],
        dir: &Path,
        more: &[&str],
        host: Option<&str>,
    ) -> Broker {
        let name = |a: &SocketAddr| match host {
            Some(host) => format!("{host}:{}", a.port()),
            None => a.to_string(),
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_replog"));
        cmd.args(["node", "--id", &id.to_string()])
            .args(["--listen", &name(&addrs[id as usize - 1])]);
        for (i, a) in (1u64..).zip(addrs) {
            if i != id {
                cmd.args(["--peer", &format!("{i}@{}", name(a))]);
            }
        }
        if !more.contains(&"--election-timeout-ms") {
            cmd.args(["--election-timeout-ms", "500"]);
        }
        cmd.args(more)
            .arg("--data")
            .arg(dir.join(format!("proc-{id}")))
            .stdout(Stdio::null())
            .stderr(log_to(id));
        Broker::from(cmd.spawn().expect("spawn replog node"))
    }

    /// Sends `signal` to the process (SIGSTOP pauses it until SIGCONT).
    pub fn signal(&mut self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_child(&self.child);
        rustix::process::kill_process(pid, signal).expect("signal the broker");
        self.stopped = signal == rustix::process::Signal::STOP;
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if self.stopped {
            self.signal(rustix::process::Signal::CONT);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the `replog` binary with `args` and `stdin`; returns (success, stdout, stderr).
pub fn cli(args: &[&str], stdin: &str) -> (bool, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_replog"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run replog");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Where broker `id` logs: nowhere, or, with `REPLOG_TEST_LOG_DIR` set, appended to
/// `broker-{id}.log` in that directory (for looking into a test run; tests never read it).
fn log_to(id: u64) -> Stdio {
    let Some(dir) = std::env::var_os("REPLOG_TEST_LOG_DIR") else {
        return Stdio::null();
    };
    let path = std::path::Path::new(&dir).join(format!("broker-{id}.log"));
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_or_else(|_| Stdio::null(), Stdio::from)
}
