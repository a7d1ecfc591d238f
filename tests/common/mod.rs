//! An origin that counts its calls and how many run at once.
#![allow(dead_code)]
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Every test wait is bounded by this.
pub const DEADLINE: Duration = Duration::from_secs(10);

#[derive(Clone, Default)]
pub struct Origin {
    calls: Arc<AtomicUsize>,
    running: Arc<AtomicUsize>,
    max_running: Arc<AtomicUsize>,
}

impl Origin {
    /// Marks one origin call as started; the call ends when the guard drops.
    pub fn enter(&self) -> Running {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        Running {
            running: self.running.clone(),
            call: n,
        }
    }

    /// A call that takes `latency` and returns its call number.
    pub async fn slow(&self, latency: Duration) -> usize {
        let running = self.enter();
        tokio::time::sleep(latency).await;
        running.call
    }

    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    pub fn max_running(&self) -> usize {
        self.max_running.load(Ordering::SeqCst)
    }
}

pub struct Running {
    running: Arc<AtomicUsize>,
    pub call: usize,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An application error, as a cached function's `E`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppError {
    Down(usize),
    Cache(stampede::Error),
}

impl From<stampede::Error> for AppError {
    fn from(error: stampede::Error) -> Self {
        AppError::Cache(error)
    }
}

/// Awaits `f` within [`DEADLINE`], failing the test instead of hanging it.
pub async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(DEADLINE, f)
        .await
        .expect("a wait in this test overran its deadline")
}

/// Awaits `done`, polled within [`DEADLINE`]: for the effects of background work that
/// has no signal of its own (a detached load landing in the store).
pub async fn eventually(done: impl FnMut() -> bool) {
    eventually_within(DEADLINE, done).await
}

/// [`eventually`] within `limit`: for background work sized past [`DEADLINE`] on a busy
/// machine (thousands of calls to replay).
pub async fn eventually_within(limit: Duration, mut done: impl FnMut() -> bool) {
    let polled = async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::time::timeout(limit, polled)
        .await
        .expect("a wait in this test overran its deadline")
}

/// Awaits the end of every load of `cache` (the store is written before a flight ends).
pub async fn loads_finished<K, V, E>(cache: &stampede::Cache<K, V, E>)
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    eventually(|| cache.stats().in_flight == 0).await
}

/// A cache on Tokio's clock, for tests that pause and advance time.
pub fn paused<K, V, E>(policy: stampede::Policy) -> stampede::Cache<K, V, E>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + From<stampede::Error> + 'static,
{
    stampede::CacheBuilder::new(policy, E::from)
        .clock(stampede::Clock::tokio())
        .build()
}

/// The two leader modes, so one test body can run under both.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// `Cache::load`: the origin owns what it uses.
    Detached,
    /// `Cache::load_inline`: the origin borrows `origin`.
    Inline,
}

impl Mode {
    /// Loads `key` in this mode through an origin that takes `latency` and returns its
    /// call number.
    pub async fn load<K, E>(
        self,
        cache: &stampede::Cache<K, usize, E>,
        key: K,
        origin: &Origin,
        latency: Duration,
    ) -> Result<usize, E>
    where
        K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
        E: Clone + Send + Sync + 'static,
    {
        match self {
            Mode::Detached => {
                let origin = origin.clone();
                cache
                    .load(key, move || async move { Ok(origin.slow(latency).await) })
                    .await
            }
            Mode::Inline => {
                cache
                    .load_inline(key, || async { Ok(origin.slow(latency).await) })
                    .await
            }
        }
    }
}

/// `n` tasks that start together and each load `key_of(i)` in `mode`.
pub fn callers_at_once<K, E>(
    n: usize,
    mode: Mode,
    cache: &stampede::Cache<K, usize, E>,
    origin: &Origin,
    latency: Duration,
    key_of: impl Fn(usize) -> K,
) -> Vec<tokio::task::JoinHandle<Result<usize, E>>>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    E: Clone + Send + Sync + 'static,
{
    let start = Arc::new(tokio::sync::Barrier::new(n));
    (0..n)
        .map(|i| {
            let (cache, origin, start, key) =
                (cache.clone(), origin.clone(), start.clone(), key_of(i));
            tokio::spawn(async move {
                start.wait().await;
                mode.load(&cache, key, &origin, latency).await
            })
        })
        .collect()
}

/// A config file in the temporary directory, removed when dropped.
pub struct ConfigFile(pub std::path::PathBuf);

impl ConfigFile {
    pub fn new(name: &str, text: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "stampede-config-{}-{name}.toml",
            std::process::id()
        ));
        std::fs::write(&path, text).expect("the temporary directory is writable");
        ConfigFile(path)
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A replica of `backend` that waits up to [`PATIENT_REDIS`] for each Redis call (and for
/// connecting) instead of the default 250 ms. A call past its response timeout fails and
/// the loader loads in this process, by design (the black-holed tests check that); on a
/// loaded machine a starved scheduler can hold a healthy call that long, and a fresh
/// replica's first calls also wait for its connection. A test that counts origin calls
/// across replicas is about the store's answers, so it must not count those stalls.
pub fn patient_replica(backend: stampede::Backend) -> stampede::Runtime {
    static FILES: AtomicUsize = AtomicUsize::new(0);
    let n = FILES.fetch_add(1, Ordering::Relaxed);
    let millis = PATIENT_REDIS.as_millis();
    let file = ConfigFile::new(
        &format!("patient-{n}"),
        &format!(
            "[backend]\nresponse_timeout = \"{millis}ms\"\nconnect_timeout = \"{millis}ms\"\n"
        ),
    );
    stampede::Runtime::builder()
        .file(&file.0)
        .expect("the patience file parses")
        .backend(backend)
        .build()
        .expect("a shared backend with its url or nodes")
}

/// How long a [`patient_replica`] waits for one Redis call: far past any scheduling stall,
/// well within [`DEADLINE`].
pub const PATIENT_REDIS: Duration = Duration::from_secs(2);

/// What a child test prints before each line the parent reads back (see [`run_child`]).
pub const REPORT: &str = "@report ";

/// Runs the ignored test `child` of the module `module` (its `module_path!()`) in a new
/// process of this binary with `env` (and no other `STAMPEDE_*` variable), within the
/// deadline, and returns its `report` lines.
pub fn run_child(module: &str, child: &str, env: &[(&str, std::ffi::OsString)]) -> Vec<String> {
    // libtest names a test by its path without the crate's name.
    let module = module.split_once("::").map_or("", |(_crate, path)| path);
    let test = format!("{module}::{child}");
    let mut command = std::process::Command::new(std::env::current_exe().unwrap());
    command
        .args([
            test.as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("STAMPEDE_") {
            command.env_remove(key);
        }
    }
    command.env(crate::CHILD, "1");
    command.envs(env.iter().map(|(k, v)| (k, v)));
    let mut process = command.spawn().unwrap();
    let deadline = std::time::Instant::now() + DEADLINE;
    while process.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = process.kill();
            panic!("{child} overran its deadline");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let output = process.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{child} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reports: Vec<String> = stdout
        .lines()
        // libtest prints "test <name> ... " without a newline before the child's output.
        .filter_map(|line| Some(line[line.find(REPORT)? + REPORT.len()..].to_owned()))
        .collect();
    assert!(!reports.is_empty(), "{child} did not run:\n{stdout}");
    reports
}
