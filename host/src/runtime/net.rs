//! HTTP for the network runtimes (`openai`, `anthropic`, `http`) and the model gateway: one request under a deadline, a cap on
//! the response body, failures classified into [`TurnError`] kinds, and retries.
//!
//! Retries: HTTP 429 and 5xx, and a connection closed before any response arrived, are tried
//! again up to the agent's `retries` (default 2), waiting by an exponential backoff with
//! jitter (the `backon` crate's schedule: 100 ms doubling to 2 s) or by the server's
//! `Retry-After` (seconds or an HTTP date) when it says longer — never past the turn's
//! deadline. Each retry is recorded, so traces and the journal explain a slow turn.
//!
//! One [`Net`] per agent endpoint for the whole sweep: one connection pool, and the
//! endpoint's limits shared by every lane — `max_concurrency` requests in flight (a semaphore),
//! `requests_per_minute` evenly spaced, and a `Retry-After` on 429/503 that pauses the whole
//! endpoint, not one lane. Waits for these are recorded like retries.
//!
//! The exchange runs on the calling thread: the client's futures (the request, its
//! connection, the body) are driven by a single-threaded runtime of the endpoint's own,
//! entered by whichever caller is sending — no hand-off to a client thread and back, the
//! way curl sends from one thread. Callers that send at once share it: one drives the
//! connections while the others wait for their answers (tokio's current-thread scheduler).
//! A caller that passes the sweep's [`Interrupt`] gets an exchange that ends within
//! [`STOP_POLL`] of a cut, waits and retries included, so a model runtime can be called in
//! place ([`super::AgentHandle::cooperative`]).
//!
//! Nothing here redacts: everything a runtime returns passes through the agent's
//! [`crate::secrets::Redactor`] in [`super::for_agent`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use bytes::Bytes;
use serde_json::Value;
use windtunnel_model::{Retry, TurnErrorKind};

use super::{RuntimeError, TurnError};
use crate::interrupt::Interrupt;

pub(crate) type HttpClient = reqwest::Client;

/// How often an exchange (or a wait) looks at the sweep's stop state.
pub(crate) const STOP_POLL: Duration = Duration::from_millis(25);

/// Default cap on a response body (`max_response_bytes`).
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: u64 = 8 << 20;

/// Default retries of a failed request (`retries`).
pub(crate) const DEFAULT_RETRIES: u32 = 2;

/// How much of an error response's body an error message quotes.
const ERROR_BODY_EXCERPT: usize = 200;

/// An HTTP client for one agent endpoint, with its limits; clones share both.
#[derive(Clone)]
pub(crate) struct Net {
    client: HttpClient,
    driver: Arc<Driver>,
    max_body: u64,
    retries: u32,
    limits: Arc<Limits>,
    /// The agent's secrets: an error body is redacted before it is cut to an excerpt, so a
    /// cut can never split an echoed key out of reach of the redactor.
    redactor: Arc<crate::secrets::Redactor>,
    /// The URLs requests went to, parsed once (an endpoint has a few).
    urls: Arc<Mutex<Vec<(String, reqwest::Url)>>>,
}

/// How many parsed URLs a [`Net`] keeps.
const PARSED_URLS: usize = 8;

/// What one request waited for before it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// `paused` (a `Retry-After`), `rate` (`requests_per_minute`) or `concurrency`
    /// (`max_concurrency`).
    pub reason: &'static str,
    pub wait_ms: u64,
}

/// The runtime that drives a [`Net`]'s futures on the threads that send (current-thread:
/// it has no thread of its own; DNS lookups get a blocking thread when a connection opens).
struct Driver(Option<tokio::runtime::Runtime>);

impl Driver {
    fn new() -> Result<Driver, RuntimeError> {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|rt| Driver(Some(rt)))
            .map_err(|e| RuntimeError(format!("cannot start the HTTP client's runtime: {e}")))
    }

    /// Runs `f` to its end on this thread, or until `stop` is cut (`None` then).
    fn run<F: Future>(&self, stop: Option<&Interrupt>, f: F) -> Option<F::Output> {
        let rt = self.0.as_ref()?;
        let Some(stop) = stop else {
            return Some(rt.block_on(f));
        };
        if stop.is_cut() {
            return None;
        }
        rt.block_on(async {
            tokio::select! {
                biased;
                out = f => Some(out),
                () = cut(stop) => None,
            }
        })
    }
}

/// Ends when `stop` is cut.
async fn cut(stop: &Interrupt) {
    while !stop.is_cut() {
        tokio::time::sleep(STOP_POLL).await;
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The last clone of a Net may go on an async thread (the gateway's upstream, in its
        // server's runtime), where waiting for the runtime's tasks would panic.
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The limits of one endpoint, shared by every lane.
#[derive(Default)]
struct Limits {
    /// `max_concurrency`: a permit per request in flight.
    in_flight: Option<tokio::sync::Semaphore>,
    /// The spacing `requests_per_minute` asks for, and when the next request may go.
    spacing: Option<(Duration, Mutex<Instant>)>,
    /// Nothing is sent before this instant (a `Retry-After`).
    paused_until: Mutex<Option<Instant>>,
}

/// A request slot taken from `max_concurrency` (none without one); given back when dropped.
type Slot<'a> = Option<tokio::sync::SemaphorePermit<'a>>;

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Why a request was not sent.
enum Held {
    /// The turn's deadline came first.
    Deadline,
    /// The endpoint is paused (a `Retry-After`) past the turn's deadline.
    Paused(Instant),
    /// The sweep was cut while the request waited.
    Cut,
}

/// Sleeps `d`, or less when `stop` is cut first (`false` then).
fn sleep(d: Duration, stop: Option<&Interrupt>) -> bool {
    match stop {
        Some(stop) => stop.sleep(d),
        None => {
            std::thread::sleep(d);
            true
        }
    }
}

impl Limits {
    fn paused_until(&self) -> Option<Instant> {
        let p = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        p.filter(|u| *u > Instant::now())
    }

    /// Waits (at most until `deadline`) for the endpoint to take one more request: no pause,
    /// a `requests_per_minute` turn, a `max_concurrency` slot. A pause that begins while a
    /// request waits for its turn or slot holds it too: nothing is sent during a pause.
    fn admit(
        &self,
        driver: &Driver,
        deadline: Instant,
        stop: Option<&Interrupt>,
        waits: &mut Vec<Wait>,
    ) -> Result<Slot<'_>, Held> {
        loop {
            if let Some(until) = self.paused_until() {
                if until >= deadline {
                    return Err(Held::Paused(until));
                }
                let d = until.saturating_duration_since(Instant::now());
                let slept = sleep(d, stop);
                waits.push(Wait {
                    reason: "paused",
                    wait_ms: millis(d),
                });
                if !slept {
                    return Err(Held::Cut);
                }
            }
            let slot = self.slot(driver, deadline, stop, waits)?;
            self.space(deadline, stop, waits)?;
            // A pause set while this request waited (another lane's 429): wait it out
            // without the slot.
            if self.paused_until().is_some() {
                drop(slot);
                continue;
            }
            return Ok(slot);
        }
    }

    /// Waits for this request's `requests_per_minute` turn.
    fn space(
        &self,
        deadline: Instant,
        stop: Option<&Interrupt>,
        waits: &mut Vec<Wait>,
    ) -> Result<(), Held> {
        let Some((interval, next)) = &self.spacing else {
            return Ok(());
        };
        let slot = {
            let mut next = next.lock().unwrap_or_else(|e| e.into_inner());
            let slot = (*next).max(Instant::now());
            if slot >= deadline {
                return Err(Held::Deadline);
            }
            *next = slot + *interval;
            slot
        };
        let d = slot.saturating_duration_since(Instant::now());
        if !d.is_zero() {
            let slept = sleep(d, stop);
            waits.push(Wait {
                reason: "rate",
                wait_ms: millis(d),
            });
            if !slept {
                return Err(Held::Cut);
            }
        }
        Ok(())
    }

    /// Waits for a `max_concurrency` slot, on the endpoint's driver: a cut or the deadline
    /// ends the wait.
    fn slot(
        &self,
        driver: &Driver,
        deadline: Instant,
        stop: Option<&Interrupt>,
        waits: &mut Vec<Wait>,
    ) -> Result<Slot<'_>, Held> {
        let Some(permits) = &self.in_flight else {
            return Ok(None);
        };
        if let Ok(permit) = permits.try_acquire() {
            return Ok(Some(permit));
        }
        let started = Instant::now();
        let acquired = driver.run(stop, async {
            tokio::time::timeout_at(deadline.into(), permits.acquire()).await
        });
        let permit = match acquired {
            None => return Err(Held::Cut),
            Some(Err(_elapsed)) => return Err(Held::Deadline),
            // The semaphore is never closed.
            Some(Ok(permit)) => permit.map_err(|_closed| Held::Cut)?,
        };
        let d = started.elapsed();
        if d >= Duration::from_millis(1) {
            waits.push(Wait {
                reason: "concurrency",
                wait_ms: millis(d),
            });
        }
        Ok(Some(permit))
    }

    fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        let mut p = self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        if p.is_none_or(|u| u < until) {
            *p = Some(until);
        }
    }
}

/// What a turn's requests retried and waited for.
#[derive(Debug, Default)]
pub struct Log {
    pub retries: Vec<Retry>,
    pub waits: Vec<Wait>,
}

/// One request.
pub(crate) struct Request<'a> {
    /// Headers sent beside the ones `wt` sets (the gateway forwards an agent's own).
    pub headers: &'a [(String, String)],
    pub method: &'a str,
    pub url: &'a str,
    pub auth: Option<&'a str>,
    pub body: Option<&'a Value>,
}

/// One attempt's failure.
struct Failure {
    error: TurnError,
    retryable: bool,
    /// The server's `Retry-After`, when it sent one.
    retry_after: Option<Duration>,
    /// The server's HTTP status, when it answered with one.
    status: Option<u16>,
}

impl Failure {
    fn fatal(kind: TurnErrorKind, message: String) -> Failure {
        Failure {
            error: TurnError::new(kind, message),
            retryable: false,
            retry_after: None,
            status: None,
        }
    }
}

impl Net {
    /// The client for an agent's endpoint, with the limits its config sets; `redactor`
    /// holds the agent's secrets.
    pub(crate) fn new(
        connect_timeout: Duration,
        settings: &super::agent::EndpointLimits,
        redactor: crate::secrets::Redactor,
    ) -> Result<Net, RuntimeError> {
        // A redirect is never followed: the client would turn a POST into a GET (301, 302,
        // 303) and send the agent's request, or its key, somewhere the config never named.
        let client = HttpClient::builder()
            .connect_timeout(connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            // A request goes out in one write and is never held back for more.
            .tcp_nodelay(true)
            .build()
            .map_err(|e| RuntimeError(format!("cannot build an HTTP client: {}", chain(&e))))?;
        let limits = Limits {
            in_flight: settings
                .max_concurrency
                .map(|n| tokio::sync::Semaphore::new(n as usize)),
            spacing: settings.requests_per_minute.map(|n| {
                (
                    Duration::from_secs(60) / n.max(1),
                    Mutex::new(Instant::now()),
                )
            }),
            paused_until: Mutex::new(None),
        };
        Ok(Net {
            client,
            driver: Arc::new(Driver::new()?),
            max_body: settings
                .max_response_bytes
                .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
            retries: settings.retries.unwrap_or(DEFAULT_RETRIES),
            limits: Arc::new(limits),
            redactor: Arc::new(redactor),
            urls: Arc::default(),
        })
    }

    /// `url` parsed, from the ones parsed before when it is one of them; `None` when it is
    /// no URL (the client then says why, as it would have).
    fn parsed(&self, url: &str) -> Option<reqwest::Url> {
        let mut urls = self.urls.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, u)) = urls.iter().find(|(s, _)| s == url) {
            return Some(u.clone());
        }
        let u = reqwest::Url::parse(url).ok()?;
        if urls.len() >= PARSED_URLS {
            urls.remove(0);
        }
        urls.push((url.to_owned(), u.clone()));
        Some(u)
    }

    /// The largest reply body accepted (`max_response_bytes`).
    pub(crate) fn max_body(&self) -> u64 {
        self.max_body
    }

    /// Sends `req`, retrying what is worth retrying until `deadline`, and returns the 2xx
    /// reply's body. Retries are appended to `log`.
    pub(crate) fn text(
        &self,
        req: &Request<'_>,
        deadline: Instant,
        log: &mut Log,
    ) -> Result<String, TurnError> {
        self.exchange(req, payload(req).as_ref(), deadline, None, log, None)
            .map_err(|(e, _)| e)
    }

    /// Sends `req` as [`Net::text`] does (the same limits, retries and errors), and hands a
    /// 2xx reply to `sink` as it arrives: its head, then its body chunk by chunk, within
    /// `max_response_bytes`. Nothing is retried once the head went to the sink. A failure
    /// carries the upstream's HTTP status, when it answered with one.
    /// `stop` ends it early (its run ended it), as the sweep's cut ends [`Net::json_until`].
    pub(crate) fn forward(
        &self,
        req: &Request<'_>,
        deadline: Instant,
        stop: &Interrupt,
        log: &mut Log,
        sink: &mut dyn Sink,
    ) -> Result<(), (TurnError, Option<u16>)> {
        self.exchange(
            req,
            payload(req).as_ref(),
            deadline,
            Some(stop),
            log,
            Some(sink),
        )
        .map(drop)
    }

    /// Sends `req` with `body` (JSON, serialized once for every attempt).
    fn exchange(
        &self,
        req: &Request<'_>,
        body: Option<&Bytes>,
        deadline: Instant,
        stop: Option<&Interrupt>,
        log: &mut Log,
        mut sink: Option<&mut dyn Sink>,
    ) -> Result<String, (TurnError, Option<u16>)> {
        // Every exchange ends at the sweep's cut, whether or not its caller passed the stop.
        let installed = crate::interrupt::installed();
        let stop = stop.or(installed);
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(2))
            .with_jitter()
            .with_max_times(self.retries as usize)
            .build();
        let mut attempt = 0u32;
        loop {
            let slot = match self
                .limits
                .admit(&self.driver, deadline, stop, &mut log.waits)
            {
                Ok(slot) => slot,
                Err(Held::Deadline) => return Err((timed_out(req, attempt), None)),
                Err(Held::Paused(until)) => return Err((paused(req, until), None)),
                Err(Held::Cut) => return Err((interrupted(req), None)),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err((timed_out(req, attempt), None));
            }
            let sent = self.once(
                req,
                body,
                left,
                stop,
                match sink {
                    Some(ref mut s) => Some(&mut **s as &mut dyn Sink),
                    None => None,
                },
            );
            let failure = match sent {
                Ok(text) => return Ok(text),
                Err(f) => f,
            };
            if let Some(ra) = failure.retry_after {
                // The server asked everyone to wait: every lane waits, not only this one —
                // also the one about to take this request's slot.
                self.limits.pause(ra);
            }
            drop(slot);
            let next = if failure.retryable {
                backoff.next()
            } else {
                None
            };
            let Some(delay) = next else {
                let mut error = failure.error;
                if attempt > 0 && failure.retryable {
                    error
                        .message
                        .push_str(&format!(" (after {} attempts)", attempt + 1));
                }
                return Err((error, failure.status));
            };
            let wait = failure.retry_after.map_or(delay, |ra| ra.max(delay));
            let left = deadline.saturating_duration_since(Instant::now());
            if wait >= left {
                let mut error = failure.error;
                error.message.push_str(" (no time left to retry)");
                return Err((error, failure.status));
            }
            attempt += 1;
            tracing::debug!(
                "retry {attempt} in {wait:?} after {}",
                failure.error.message
            );
            let mut retry = Retry::default();
            retry.attempt = attempt;
            retry.error = failure.error.message;
            retry.wait_ms = millis(wait);
            log.retries.push(retry);
            if !sleep(wait, stop) {
                return Err((interrupted(req), None));
            }
        }
    }

    /// Like [`Net::text`], parsing the body as JSON (an empty body is `null`).
    pub(crate) fn json(
        &self,
        req: &Request<'_>,
        deadline: Instant,
        log: &mut Log,
    ) -> Result<Value, TurnError> {
        let text = self
            .exchange(req, payload(req).as_ref(), deadline, None, log, None)
            .map_err(|(e, _)| e)?;
        parse_json(req, &text, &self.redactor)
    }

    /// Like [`Net::json`], with `body` as the request's JSON body, serialized already
    /// (`req.body` is not sent), and ended (a [`TurnErrorKind::Interrupted`] error) within
    /// [`STOP_POLL`] once `stop` is cut: while the request waits for the endpoint's limits,
    /// for its answer or for a retry. Nothing is sent once `stop` is cut.
    pub(crate) fn json_until(
        &self,
        req: &Request<'_>,
        body: Bytes,
        deadline: Instant,
        stop: &Interrupt,
        log: &mut Log,
    ) -> Result<Value, TurnError> {
        let text = self
            .exchange(req, Some(&body), deadline, Some(stop), log, None)
            .map_err(|(e, _)| e)?;
        parse_json(req, &text, &self.redactor)
    }

    /// One attempt.
    fn once(
        &self,
        req: &Request<'_>,
        body: Option<&Bytes>,
        timeout: Duration,
        stop: Option<&Interrupt>,
        sink: Option<&mut dyn Sink>,
    ) -> Result<String, Failure> {
        let (method, url) = (req.method, req.url);
        let verb = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|e| Failure::fatal(TurnErrorKind::Protocol, format!("{method} {url}: {e}")))?;
        let mut builder = match self.parsed(url) {
            Some(parsed) => self.client.request(verb, parsed),
            None => self.client.request(verb, url),
        }
        .timeout(timeout);
        for (name, value) in req.headers {
            builder = builder.header(name, value);
        }
        if let Some(key) = req.auth {
            builder = builder.bearer_auth(key);
        }
        if let Some(b) = body {
            builder = builder
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.clone());
        }
        // A failure before the reply's head; one while reading its body is `reading`'s.
        let transport = |e: reqwest::Error| {
            let (kind, what, retryable) = if e.is_timeout() {
                (TurnErrorKind::Timeout, "timed out".to_owned(), false)
            } else if e.is_connect() {
                let what = format!("cannot connect: {}", root_cause(&e));
                (TurnErrorKind::Transport, what, false)
            } else if closed_early(&e) {
                let what = format!("connection closed before a response: {}", chain(&e));
                (TurnErrorKind::Transport, what, true)
            } else {
                (TurnErrorKind::Transport, chain(&e), false)
            };
            Failure {
                error: TurnError::new(kind, format!("{method} {url}: {what}")),
                retryable,
                retry_after: None,
                status: None,
            }
        };
        let reading = |e: &reqwest::Error| {
            let (kind, what) = if e.is_timeout() || chain(e).contains("timed out") {
                (
                    TurnErrorKind::Timeout,
                    "timed out reading the body".to_owned(),
                )
            } else {
                (
                    TurnErrorKind::Transport,
                    format!("reading the body: {}", chain(e)),
                )
            };
            Failure::fatal(kind, format!("{method} {url}: {what}"))
        };
        let too_big = || {
            Failure::fatal(
                TurnErrorKind::Protocol,
                format!(
                    "{method} {url}: reply exceeded {} bytes (max_response_bytes)",
                    self.max_body
                ),
            )
        };
        let streaming = sink.is_some();
        // The head, and unless it goes to a sink, the whole body: one run of the driver.
        let fetched = self.driver.run(stop, async {
            let mut resp = builder.send().await.map_err(transport)?;
            if resp.content_length().is_some_and(|n| n > self.max_body) {
                return Err(too_big());
            }
            if streaming && resp.status().is_success() {
                return Ok((resp, Vec::new()));
            }
            let mut bytes = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| reading(&e))? {
                if (bytes.len() + chunk.len()) as u64 > self.max_body {
                    return Err(too_big());
                }
                bytes.extend_from_slice(&chunk);
            }
            Ok((resp, bytes))
        });
        let (resp, bytes) = fetched.unwrap_or_else(|| Err(cut_failure(req)))?;
        let status = resp.status();
        if let Some(sink) = sink
            && status.is_success()
        {
            return self.stream(req, resp, stop, sink).map(|()| String::new());
        }
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        if status.is_success() {
            return Ok(text);
        }
        let code = status.as_u16();
        if status.is_redirection() {
            let location = resp
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(|l| l.chars().take(512).collect::<String>());
            let location = location.as_deref().unwrap_or("nowhere");
            let location = self.redactor.scrub(location);
            return Err(Failure {
                error: TurnError::new(
                    TurnErrorKind::Transport,
                    format!(
                        "{method} {url}: HTTP {code}, a redirect to {location}: wt does not follow redirects (a {method} would not stay a {method}); put the final URL in the agent config"
                    ),
                ),
                retryable: false,
                retry_after: None,
                status: Some(code),
            });
        }
        let body = if is_event_stream(&text) {
            format!("an event stream ({} bytes, not quoted)", text.len())
        } else {
            self.redactor.excerpt(text.trim(), ERROR_BODY_EXCERPT)
        };
        let retryable = code == 429 || status.is_server_error();
        Err(Failure {
            error: TurnError::new(
                TurnErrorKind::Transport,
                format!("{method} {url}: HTTP {code}: {body}"),
            ),
            retryable,
            retry_after: retry_after(resp.headers()).filter(|_| code == 429 || code == 503),
            status: Some(code),
        })
    }

    /// Hands a 2xx reply to `sink` as it arrives, within `max_response_bytes`. The sink is
    /// called between runs of the driver, never inside one: it may block (the gateway's
    /// sink waits for the agent to take a chunk).
    fn stream(
        &self,
        req: &Request<'_>,
        mut resp: reqwest::Response,
        stop: Option<&Interrupt>,
        sink: &mut dyn Sink,
    ) -> Result<(), Failure> {
        let (method, url) = (req.method, req.url);
        let content_type = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let gone = || {
            Failure::fatal(
                TurnErrorKind::Transport,
                format!("{method} {url}: the caller went away before the reply ended"),
            )
        };
        if !sink.head(resp.status().as_u16(), content_type.as_deref()) {
            return Err(gone());
        }
        let mut total = 0u64;
        loop {
            let chunk = match self.driver.run(stop, resp.chunk()) {
                None => return Err(cut_failure(req)),
                Some(Ok(None)) => return Ok(()),
                Some(Ok(Some(chunk))) => chunk,
                Some(Err(e)) => {
                    let (kind, what) = if e.is_timeout() || chain(&e).contains("timed out") {
                        (TurnErrorKind::Timeout, "timed out reading the body".into())
                    } else {
                        (
                            TurnErrorKind::Transport,
                            format!("reading the body: {}", chain(&e)),
                        )
                    };
                    return Err(Failure::fatal(kind, format!("{method} {url}: {what}")));
                }
            };
            total += chunk.len() as u64;
            if total > self.max_body {
                return Err(Failure::fatal(
                    TurnErrorKind::Protocol,
                    format!(
                        "{method} {url}: reply exceeded {} bytes (max_response_bytes)",
                        self.max_body
                    ),
                ));
            }
            if !sink.chunk(&chunk) {
                return Err(gone());
            }
        }
    }
}

/// Where [`Net::forward`] hands a 2xx reply as it arrives.
pub(crate) trait Sink {
    /// The reply's status and content type, before any of its body. `false`: the receiver
    /// is gone, stop.
    fn head(&mut self, status: u16, content_type: Option<&str>) -> bool;
    /// The next bytes of the body. `false`: the receiver is gone, stop.
    fn chunk(&mut self, bytes: &[u8]) -> bool;
}

/// A request not sent because the endpoint asked, with a `Retry-After`, to wait past the
/// turn's deadline: says until when, never "timed out" for a request that never went out.
fn paused(req: &Request<'_>, until: Instant) -> TurnError {
    let left = until.saturating_duration_since(Instant::now());
    let when = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::try_from(left).unwrap_or_default())
        .map_or_else(
            |_| "later".to_owned(),
            |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        );
    TurnError::new(
        TurnErrorKind::Transport,
        format!(
            "{} {}: not sent: the endpoint is paused until {when} (its Retry-After), past this request's deadline",
            req.method, req.url
        ),
    )
}

/// A request's JSON body, serialized.
fn payload(req: &Request<'_>) -> Option<Bytes> {
    req.body
        .map(|b| Bytes::from(serde_json::to_vec(b).unwrap_or_default()))
}

/// A reply body as JSON (an empty one is `null`).
fn parse_json(
    req: &Request<'_>,
    text: &str,
    redactor: &crate::secrets::Redactor,
) -> Result<Value, TurnError> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(text).map_err(|e| {
        // An event stream splits what it says across its events: a secret echoed in it may
        // be in pieces no redactor recognises, so none of it is quoted.
        let said = if is_event_stream(text) {
            format!(
                "an event stream ({} bytes, not quoted) where a JSON body was asked for",
                text.len()
            )
        } else {
            format!(
                "malformed JSON in the response ({e}): {:?}",
                redactor.excerpt(text, 120)
            )
        };
        TurnError::new(
            TurnErrorKind::Protocol,
            format!("{} {}: {said}", req.method, req.url),
        )
    })
}

/// Does `text` read as server-sent events (its first line a `data:`, `event:`, `id:` or
/// `retry:` field, or a comment)?
fn is_event_stream(text: &str) -> bool {
    let first = text.trim_start().lines().next().unwrap_or_default();
    ["data:", "event:", "id:", "retry:", ":"]
        .iter()
        .any(|f| first.starts_with(f))
}

/// A request ended because the sweep was cut (`wt` is stopping).
fn interrupted(req: &Request<'_>) -> TurnError {
    TurnError::new(
        TurnErrorKind::Interrupted,
        format!("{} {}: interrupted: wt is stopping", req.method, req.url),
    )
}

fn cut_failure(req: &Request<'_>) -> Failure {
    Failure {
        error: interrupted(req),
        retryable: false,
        retry_after: None,
        status: None,
    }
}

fn timed_out(req: &Request<'_>, attempts: u32) -> TurnError {
    let mut message = format!("{} {}: timed out", req.method, req.url);
    if attempts > 0 {
        message.push_str(&format!(" (after {} attempts)", attempts + 1));
    }
    TurnError::new(TurnErrorKind::Timeout, message)
}

/// `Retry-After`: delay-seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs.min(86_400)));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO)
            .min(Duration::from_secs(86_400)),
    )
}

/// Did the server close the connection before answering (a reset, an early EOF)?
fn closed_early(e: &(dyn std::error::Error + 'static)) -> bool {
    use std::io::ErrorKind;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        let text = c.to_string();
        if text.contains("connection closed before message completed")
            || text.contains("IncompleteMessage")
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// An error with its causes, on one line, each cause once.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}

/// The innermost cause of an error (e.g. `tcp connect error: Connection refused`).
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// What the test server does with a request's body: the status, extra header lines and
    /// body of its answer, or `None` to never answer.
    type Answer = dyn Fn(&str) -> Option<(u16, &'static str, String)> + Send + Sync;

    /// A keep-alive HTTP/1.1 server on loopback, a thread per connection, that counts its
    /// connections and requests.
    pub(crate) struct Server {
        pub(crate) url: String,
        pub(crate) connections: Arc<AtomicUsize>,
        pub(crate) requests: Arc<AtomicUsize>,
    }

    pub(crate) fn server(
        answer: impl Fn(&str) -> Option<(u16, &'static str, String)> + Send + Sync + 'static,
    ) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!(
            "http://{}/v1/chat/completions",
            listener.local_addr().unwrap()
        );
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let answer: Arc<Answer> = Arc::new(answer);
        let (c, r) = (connections.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                c.fetch_add(1, Ordering::SeqCst);
                let (r, answer) = (r.clone(), answer.clone());
                std::thread::spawn(move || serve(stream, &r, &*answer));
            }
        });
        Server {
            url,
            connections,
            requests,
        }
    }

    fn serve(stream: TcpStream, requests: &AtomicUsize, answer: &Answer) {
        let mut out = stream.try_clone().unwrap();
        let mut reader = BufReader::new(stream);
        loop {
            let mut length = 0usize;
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                if line == "\r\n" {
                    break;
                }
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("content-length")
                {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() {
                return;
            }
            requests.fetch_add(1, Ordering::SeqCst);
            let Some((status, headers, text)) = answer(&String::from_utf8_lossy(&body)) else {
                // Never answers; the client goes away when it is done waiting.
                let _ = reader.read(&mut [0]);
                return;
            };
            let head = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{headers}\r\n",
                text.len()
            );
            if out.write_all(format!("{head}{text}").as_bytes()).is_err() {
                return;
            }
        }
    }

    pub(crate) fn net(limits: &super::super::agent::EndpointLimits) -> Net {
        Net::new(
            Duration::from_secs(5),
            limits,
            crate::secrets::Redactor::new(),
        )
        .unwrap()
    }

    fn post<'a>(url: &'a str, body: &'a Value) -> Request<'a> {
        Request {
            headers: &[],
            method: "POST",
            url,
            auth: None,
            body: Some(body),
        }
    }

    /// A `json_until` call of `url`, cut after `after` when it is some.
    fn cut_call(url: &str, after: Option<Duration>) -> Result<Value, TurnError> {
        let net = net(&Default::default());
        let stop = Interrupt::new();
        if let Some(after) = after {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(after);
                stop.cut();
            });
        } else {
            stop.cut();
        }
        let req = Request {
            headers: &[],
            method: "POST",
            url,
            auth: None,
            body: None,
        };
        // A deadline far beyond the cut: only the cut can end these calls early.
        let deadline = Instant::now() + Duration::from_secs(120);
        net.json_until(
            &req,
            Bytes::from_static(b"{}"),
            deadline,
            &stop,
            &mut Log::default(),
        )
    }

    #[test]
    fn a_cut_ends_an_exchange_waiting_for_its_answer() {
        let srv = server(|_| None);
        let e = cut_call(&srv.url, Some(Duration::from_millis(200))).unwrap_err();
        assert_eq!(e.kind, TurnErrorKind::Interrupted, "{e}");
        assert!(e.message.contains("interrupted: wt is stopping"), "{e}");
        assert_eq!(
            srv.requests.load(Ordering::SeqCst),
            1,
            "the request went out"
        );
    }

    #[test]
    fn nothing_is_sent_once_cut() {
        let srv = server(|_| Some((200, "", "{}".into())));
        let e = cut_call(&srv.url, None).unwrap_err();
        assert_eq!(e.kind, TurnErrorKind::Interrupted, "{e}");
        assert_eq!(srv.requests.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_cut_ends_the_wait_for_a_retry() {
        // Retry-After: 60 pauses the endpoint past any wait this test would sit out.
        let srv = server(|_| Some((503, "retry-after: 60\r\n", "{}".into())));
        let e = cut_call(&srv.url, Some(Duration::from_millis(300))).unwrap_err();
        assert_eq!(e.kind, TurnErrorKind::Interrupted, "{e}");
        assert_eq!(
            srv.requests.load(Ordering::SeqCst),
            1,
            "no retry after the cut"
        );
    }

    #[test]
    fn a_cut_ends_the_wait_for_a_concurrency_slot() {
        let srv = server(|_| None);
        let net = net(&super::super::agent::EndpointLimits {
            max_concurrency: Some(1),
            ..Default::default()
        });
        let stop = Interrupt::new();
        let holder = {
            let (net, stop, url) = (net.clone(), stop.clone(), srv.url.clone());
            std::thread::spawn(move || {
                let req = post(&url, &Value::Null);
                let deadline = Instant::now() + Duration::from_secs(120);
                net.json_until(&req, Bytes::new(), deadline, &stop, &mut Log::default())
            })
        };
        while srv.requests.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
        let cutter = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            cutter.cut();
        });
        let req = post(&srv.url, &Value::Null);
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut log = Log::default();
        let e = net
            .json_until(&req, Bytes::new(), deadline, &stop, &mut log)
            .unwrap_err();
        assert_eq!(e.kind, TurnErrorKind::Interrupted, "{e}");
        assert_eq!(
            srv.requests.load(Ordering::SeqCst),
            1,
            "the second never went out"
        );
        assert_eq!(
            holder.join().unwrap().unwrap_err().kind,
            TurnErrorKind::Interrupted
        );
    }

    #[test]
    fn lanes_sharing_a_net_each_get_their_own_answers_on_kept_connections() {
        // The reply echoes the request: a lane that got another's answer would see it.
        let srv = server(|body| Some((200, "", body.to_owned())));
        let net = net(&Default::default());
        let lanes: Vec<_> = (0..6)
            .map(|lane| {
                let (net, url) = (net.clone(), srv.url.clone());
                std::thread::spawn(move || {
                    let stop = Interrupt::new();
                    for i in 0..40 {
                        let body = serde_json::json!({"lane": lane, "i": i});
                        let req = post(&url, &body);
                        let deadline = Instant::now() + Duration::from_secs(60);
                        let got = if i % 2 == 0 {
                            net.json(&req, deadline, &mut Log::default()).unwrap()
                        } else {
                            let bytes = Bytes::from(serde_json::to_vec(&body).unwrap());
                            net.json_until(&req, bytes, deadline, &stop, &mut Log::default())
                                .unwrap()
                        };
                        assert_eq!(got, body);
                    }
                })
            })
            .collect();
        for lane in lanes {
            lane.join().unwrap();
        }
        assert_eq!(srv.requests.load(Ordering::SeqCst), 240);
        // Connections are kept, not one per request. (A lane whose request finds no idle
        // connection at once starts one while it waits for an idle one, so lanes that take
        // turns on one driver may open a few more than there are lanes.)
        let connections = srv.connections.load(Ordering::SeqCst);
        assert!(
            connections < 60,
            "{connections} connections for 240 requests"
        );
    }

    #[test]
    fn one_lane_keeps_one_connection() {
        let srv = server(|_| Some((200, "", "{\"ok\":true}".into())));
        let net = net(&Default::default());
        for _ in 0..20 {
            let req = post(&srv.url, &Value::Null);
            let got = net.json(
                &req,
                Instant::now() + Duration::from_secs(60),
                &mut Log::default(),
            );
            assert_eq!(got.unwrap(), serde_json::json!({"ok": true}));
        }
        assert_eq!(srv.connections.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn the_sink_is_never_called_inside_the_driver() {
        // The gateway's sink blocks on a channel, which tokio refuses inside a runtime.
        struct Outside(Vec<u8>);
        impl Sink for Outside {
            fn head(&mut self, status: u16, _: Option<&str>) -> bool {
                assert!(tokio::runtime::Handle::try_current().is_err());
                status == 200
            }
            fn chunk(&mut self, bytes: &[u8]) -> bool {
                assert!(tokio::runtime::Handle::try_current().is_err());
                self.0.extend_from_slice(bytes);
                true
            }
        }
        let srv = server(|_| Some((200, "", "x".repeat(100_000))));
        let net = net(&Default::default());
        let mut sink = Outside(Vec::new());
        let req = post(&srv.url, &Value::Null);
        net.forward(
            &req,
            Instant::now() + Duration::from_secs(60),
            &Interrupt::new(),
            &mut Log::default(),
            &mut sink,
        )
        .unwrap();
        assert_eq!(sink.0.len(), 100_000);
    }

    #[test]
    fn a_net_may_be_dropped_on_an_async_thread() {
        let net = net(&Default::default());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        // A blocking shutdown of the net's runtime would panic here.
        rt.block_on(async move { tokio::spawn(async move { drop(net) }).await })
            .unwrap();
    }

    #[test]
    fn the_body_goes_out_as_its_json() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let srv = server(move |body| {
            s.lock().unwrap().push(body.to_owned());
            Some((200, "", "{}".into()))
        });
        let net = net(&Default::default());
        let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "é \"q\""}], "t": 0.5});
        net.json(
            &post(&srv.url, &body),
            Instant::now() + Duration::from_secs(60),
            &mut Log::default(),
        )
        .unwrap();
        assert_eq!(*seen.lock().unwrap(), [body.to_string()]);
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(reqwest::header::RETRY_AFTER, "3".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        h.insert(
            reqwest::header::RETRY_AFTER,
            httpdate::fmt_http_date(later).parse().unwrap(),
        );
        let d = retry_after(&h).unwrap();
        assert!(
            d > Duration::from_secs(100) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        h.insert(reqwest::header::RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }
}
