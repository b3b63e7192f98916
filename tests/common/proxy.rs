//! The one microburst fault proxy of the tests (scripts/MICROBURST.md): start one in front of an
//! emulator with rules, point karpctl at `url()`, read what fired through the control API, stop
//! it on drop (also on panic), or several in parallel with `stop_all`.

use super::{Workdir, repo};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Duration;

/// One HTTP/1.0 call with a JSON body to a test proxy's control API at `url` (no chunking: the
/// answer ends when the proxy closes the connection). Returns the status line's head and the body.
pub fn control_call(url: &str, method: &str, path: &str, body: &str, timeout: Duration) -> (String, String) {
    let addr = url.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(addr).expect("connect to the proxy's control API");
    s.set_read_timeout(Some(timeout)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let (head, payload) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
    (head.to_string(), payload.to_string())
}

/// Call microburst's control API (`/_microburst/...`) on the proxy at `url`; the answer must be a
/// 2xx with a JSON body.
pub fn microburst_control(url: &str, method: &str, path: &str, body: &str) -> Value {
    let (head, payload) = control_call(url, method, path, body, Duration::from_secs(10));
    assert!(head.starts_with("HTTP/1.0 2") || head.starts_with("HTTP/1.1 2"), "{method} {path}: {head}\n{payload}");
    serde_json::from_str(&payload).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {payload}"))
}

/// One microburst proxy in front of `upstream` (ministack or moto), started with
/// `scripts/emulator proxy-start`; stopped when dropped (also on panic).
///
/// Its URL is `http://localhost:<port>`, not the `127.0.0.1` that proxy-start prints: microburst
/// 0.10.0 parses the Host header for an AWS endpoint prefix, and for any host with a dot in it
/// builds its prefix map by loading every botocore service model, seconds of CPU (about 5 s on
/// an idle machine, 15 s on two loaded cores) for the first request a fresh proxy sees. A
/// dot-free host skips that; detection then uses the SigV4 scope as usual, and the first call of
/// each service costs only that service's model (about 0.2 s, measured).
///
/// `start_warm` also sends a warm-up `GET /` (no service, so no service's rule matches it) from a
/// thread, and `url()` and the control calls wait for it, so a test can start its proxies first
/// and seed while they warm up. With the localhost URL little is left to warm (the per-service
/// model loads come with the first signed call of each service, which a `GET /` is not), so this
/// costs and saves little. The warm-up request is counted by the proxy's stats (as service
/// "unknown"), so a test that checks `by_service` starts its proxy with `start`.
pub struct Proxy {
    name: String,
    url: String,
    warm: Mutex<Option<JoinHandle<()>>>,
    stopping: Option<Child>,
}

impl Proxy {
    /// Start proxy `name` in front of `upstream` with `rules` (a JSON list, written as the YAML
    /// config: JSON is YAML).
    pub fn start(wd: &Workdir, name: &str, upstream: &str, rules: Value) -> Proxy {
        let cfg = wd.path().join(format!("microburst-{name}.yaml"));
        std::fs::write(&cfg, serde_json::to_string_pretty(&json!({ "rules": rules })).unwrap()).unwrap();
        let out = Command::new(repo().join("scripts/emulator"))
            .args(["proxy-start", name, upstream])
            .arg(&cfg)
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/emulator proxy-start");
        assert!(out.status.success(), "proxy-start {name} failed: {}", String::from_utf8_lossy(&out.stderr));
        let url = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().trim().to_string();
        assert!(url.starts_with("http://127.0.0.1:"), "proxy-start printed no URL: {url:?}");
        let url = url.replacen("127.0.0.1", "localhost", 1);
        Proxy { name: name.to_string(), url, warm: Mutex::new(None), stopping: None }
    }

    /// `start`, then a warm-up request in the background (see the type's doc).
    pub fn start_warm(wd: &Workdir, name: &str, upstream: &str, rules: Value) -> Proxy {
        let px = Proxy::start(wd, name, upstream, rules);
        let addr = px.url.trim_start_matches("http://").trim_end_matches('/').to_string();
        let warm = std::thread::spawn(move || {
            if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                let _ = s.set_read_timeout(Some(Duration::from_secs(120)));
                let _ = write!(s, "GET / HTTP/1.0\r\nHost: {addr}\r\n\r\n");
                let _ = s.read_to_end(&mut Vec::new());
            }
        });
        *px.warm.lock().unwrap() = Some(warm);
        px
    }

    /// The proxy's URL (`http://localhost:<port>`), once it is warm.
    pub fn url(&self) -> &str {
        if let Some(h) = self.warm.lock().unwrap().take() {
            let _ = h.join();
        }
        &self.url
    }

    /// A call to the control API, e.g. `control("GET", "/_microburst/stats", "")`.
    pub fn control(&self, method: &str, path: &str, body: &str) -> Value {
        microburst_control(self.url(), method, path, body)
    }

    /// The fired log (every request a rule matched, faulted or only delayed; each entry has
    /// `ts`, `rule_id`, `service`, `operation`, `action`, e.g. "error:Throttling"), oldest first.
    pub fn fired_log(&self) -> Vec<Value> {
        self.fired_query("/_microburst/fired?limit=2000")
    }

    /// The fired log entries for one operation (e.g. "CreateQueue"), oldest first.
    pub fn fired_log_of(&self, operation: &str) -> Vec<Value> {
        self.fired_query(&format!("/_microburst/fired?limit=2000&operation={operation}"))
    }

    fn fired_query(&self, path: &str) -> Vec<Value> {
        let mut v = self.control("GET", path, "").as_array().cloned().unwrap_or_default();
        v.sort_by(|a, b| a["ts"].as_f64().unwrap_or(0.0).total_cmp(&b["ts"].as_f64().unwrap_or(0.0)));
        v
    }

    /// How many times a rule fired on `operation`.
    pub fn fired(&self, operation: &str) -> usize {
        self.fired_log_of(operation).len()
    }

    /// The active rules, each with its `id`.
    pub fn rules(&self) -> Vec<Value> {
        self.control("GET", "/_microburst/rules", "").as_array().cloned().unwrap_or_default()
    }

    /// Append rules at run time (after those already there: the first matching rule wins).
    pub fn add_rules(&self, rules: Value) {
        self.control("PATCH", "/_microburst/rules", &rules.to_string());
    }

    /// Remove every rule: from now on the proxy only passes requests through.
    pub fn clear_rules(&self) {
        self.control("DELETE", "/_microburst/rules", "[]");
    }

    /// `stats.by_service` as service -> (requests, faulted).
    pub fn by_service(&self) -> BTreeMap<String, (u64, u64)> {
        let stats = self.control("GET", "/_microburst/stats", "");
        stats["by_service"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                (
                    s["service"].as_str().unwrap_or("?").to_string(),
                    (s["requests"].as_u64().unwrap_or(0), s["faulted"].as_u64().unwrap_or(0)),
                )
            })
            .collect()
    }

    /// Faults injected so far, on every service (`stats.requests.faulted`).
    pub fn faulted_total(&self) -> u64 {
        self.control("GET", "/_microburst/stats", "")["requests"]["faulted"].as_u64().unwrap_or(0)
    }

    fn stop_command(&self) -> Command {
        let mut cmd = Command::new(repo().join("scripts/emulator"));
        cmd.args(["proxy-stop", &self.name]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        cmd
    }

    /// Start stopping now (microburst takes seconds to shut down); the drop waits for it. Lets a
    /// test stop its proxies in parallel.
    pub fn begin_stop(&mut self) {
        if self.stopping.is_none() {
            self.stopping = self.stop_command().spawn().ok();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(h) = self.warm.get_mut().ok().and_then(|w| w.take()) {
            let _ = h.join();
        }
        match self.stopping.take() {
            Some(mut child) => {
                let _ = child.wait();
            }
            None => {
                let _ = self.stop_command().status();
            }
        }
    }
}

/// Stop proxies in parallel, waiting for all.
pub fn stop_all(proxies: Vec<Proxy>) {
    let mut proxies = proxies;
    for p in proxies.iter_mut() {
        p.begin_stop();
    }
    drop(proxies);
}
