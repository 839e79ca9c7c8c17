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
//! endpoint's limits shared by every lane — `max_concurrency` requests in flight,
//! `requests_per_minute` evenly spaced, and a `Retry-After` on 429/503 that pauses the whole
//! endpoint, not one lane. Waits for these are recorded like retries.
//!
//! Nothing here redacts: everything a runtime returns passes through the agent's
//! [`crate::secrets::Redactor`] in [`super::for_agent`].

use std::io::Read;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use backon::BackoffBuilder;
use serde_json::Value;
use windtunnel_sdk::model::{Retry, TurnErrorKind};

use super::{RuntimeError, TurnError};

pub(crate) type HttpClient = reqwest::blocking::Client;

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
    max_body: u64,
    retries: u32,
    limits: Arc<Limits>,
    /// The agent's secrets: an error body is redacted before it is cut to an excerpt, so a
    /// cut can never split an echoed key out of reach of the redactor.
    redactor: Arc<crate::secrets::Redactor>,
}

/// What one request waited for before it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wait {
    /// `paused` (a `Retry-After`), `rate` (`requests_per_minute`) or `concurrency`
    /// (`max_concurrency`).
    pub reason: &'static str,
    pub wait_ms: u64,
}

/// The limits of one endpoint, shared by every lane.
#[derive(Default)]
struct Limits {
    /// `max_concurrency`, and how many requests are in flight.
    in_flight: Option<(u32, Mutex<u32>, Condvar)>,
    /// The spacing `requests_per_minute` asks for, and when the next request may go.
    spacing: Option<(Duration, Mutex<Instant>)>,
    /// Nothing is sent before this instant (a `Retry-After`).
    paused_until: Mutex<Option<Instant>>,
}

/// A request slot taken from `max_concurrency`; given back when dropped.
struct Slot<'a>(Option<&'a (u32, Mutex<u32>, Condvar)>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some((_, n, cv)) = self.0 {
            *n.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            cv.notify_one();
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Why a request was not sent.
enum Held {
    /// The turn's deadline came first.
    Deadline,
    /// The endpoint is paused (a `Retry-After`) past the turn's deadline.
    Paused(Instant),
}

impl Limits {
    fn paused_until(&self) -> Option<Instant> {
        let p = *self.paused_until.lock().unwrap_or_else(|e| e.into_inner());
        p.filter(|u| *u > Instant::now())
    }

    /// Waits (at most until `deadline`) for the endpoint to take one more request: no pause,
    /// a `requests_per_minute` turn, a `max_concurrency` slot. A pause that begins while a
    /// request waits for its turn or slot holds it too: nothing is sent during a pause.
    fn admit(&self, deadline: Instant, waits: &mut Vec<Wait>) -> Result<Slot<'_>, Held> {
        loop {
            if let Some(until) = self.paused_until() {
                if until >= deadline {
                    return Err(Held::Paused(until));
                }
                let d = until.saturating_duration_since(Instant::now());
                std::thread::sleep(d);
                waits.push(Wait {
                    reason: "paused",
                    wait_ms: millis(d),
                });
            }
            let slot = self.slot(deadline, waits)?;
            self.space(deadline, waits)?;
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
    fn space(&self, deadline: Instant, waits: &mut Vec<Wait>) -> Result<(), Held> {
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
            std::thread::sleep(d);
            waits.push(Wait {
                reason: "rate",
                wait_ms: millis(d),
            });
        }
        Ok(())
    }

    /// Waits for a `max_concurrency` slot.
    fn slot(&self, deadline: Instant, waits: &mut Vec<Wait>) -> Result<Slot<'_>, Held> {
        let Some(cap) = &self.in_flight else {
            return Ok(Slot(None));
        };
        let (max, n, cv) = cap;
        let started = Instant::now();
        let mut count = n.lock().unwrap_or_else(|e| e.into_inner());
        while *count >= *max {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Held::Deadline);
            }
            count = cv
                .wait_timeout(count, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *count += 1;
        let d = started.elapsed();
        if d >= Duration::from_millis(1) {
            waits.push(Wait {
                reason: "concurrency",
                wait_ms: millis(d),
            });
        }
        Ok(Slot(Some(cap)))
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
            .build()
            .map_err(|e| RuntimeError(format!("cannot build an HTTP client: {}", chain(&e))))?;
        let limits = Limits {
            in_flight: settings
                .max_concurrency
                .map(|n| (n, Mutex::new(0), Condvar::new())),
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
            max_body: settings
                .max_response_bytes
                .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES),
            retries: settings.retries.unwrap_or(DEFAULT_RETRIES),
            limits: Arc::new(limits),
            redactor: Arc::new(redactor),
        })
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
        self.exchange(req, deadline, log, None).map_err(|(e, _)| e)
    }

    /// Sends `req` as [`Net::text`] does (the same limits, retries and errors), and hands a
    /// 2xx reply to `sink` as it arrives: its head, then its body chunk by chunk, within
    /// `max_response_bytes`. Nothing is retried once the head went to the sink. A failure
    /// carries the upstream's HTTP status, when it answered with one.
    pub(crate) fn forward(
        &self,
        req: &Request<'_>,
        deadline: Instant,
        log: &mut Log,
        sink: &mut dyn Sink,
    ) -> Result<(), (TurnError, Option<u16>)> {
        self.exchange(req, deadline, log, Some(sink)).map(drop)
    }

    fn exchange(
        &self,
        req: &Request<'_>,
        deadline: Instant,
        log: &mut Log,
        mut sink: Option<&mut dyn Sink>,
    ) -> Result<String, (TurnError, Option<u16>)> {
        let mut backoff = backon::ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(100))
            .with_max_delay(Duration::from_secs(2))
            .with_jitter()
            .with_max_times(self.retries as usize)
            .build();
        let mut attempt = 0u32;
        loop {
            let slot = match self.limits.admit(deadline, &mut log.waits) {
                Ok(slot) => slot,
                Err(Held::Deadline) => return Err((timed_out(req, attempt), None)),
                Err(Held::Paused(until)) => return Err((paused(req, until), None)),
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err((timed_out(req, attempt), None));
            }
            let sent = self.once(
                req,
                left,
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
            std::thread::sleep(wait);
        }
    }

    /// Like [`Net::text`], parsing the body as JSON (an empty body is `null`).
    pub(crate) fn json(
        &self,
        req: &Request<'_>,
        deadline: Instant,
        log: &mut Log,
    ) -> Result<Value, TurnError> {
        let text = self.text(req, deadline, log)?;
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text).map_err(|e| {
            TurnError::new(
                TurnErrorKind::Protocol,
                format!(
                    "{} {}: malformed JSON in the response ({e}): {}",
                    req.method,
                    req.url,
                    crate::score::excerpt(&text)
                ),
            )
        })
    }

    /// One attempt.
    fn once(
        &self,
        req: &Request<'_>,
        timeout: Duration,
        sink: Option<&mut dyn Sink>,
    ) -> Result<String, Failure> {
        let (method, url) = (req.method, req.url);
        let verb = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|e| Failure::fatal(TurnErrorKind::Protocol, format!("{method} {url}: {e}")))?;
        let mut builder = self.client.request(verb, url).timeout(timeout);
        for (name, value) in req.headers {
            builder = builder.header(name, value);
        }
        if let Some(key) = req.auth {
            builder = builder.bearer_auth(key);
        }
        if let Some(b) = req.body {
            builder = builder
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.to_string());
        }
        let transport = |e: reqwest::Error, reading: bool| {
            let (kind, what, retryable) = if e.is_timeout() {
                let what = if reading {
                    "timed out reading the body"
                } else {
                    "timed out"
                };
                (TurnErrorKind::Timeout, what.to_owned(), false)
            } else if e.is_connect() {
                let what = format!("cannot connect: {}", root_cause(&e));
                (TurnErrorKind::Transport, what, false)
            } else if closed_early(&e) {
                let what = format!("connection closed before a response: {}", chain(&e));
                (TurnErrorKind::Transport, what, !reading)
            } else if reading {
                let what = format!("reading the body: {}", chain(&e));
                (TurnErrorKind::Transport, what, false)
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
        let resp = builder.send().map_err(|e| transport(e, false))?;
        let status = resp.status();
        let retry_after = retry_after(resp.headers());
        let resp_location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(|l| l.chars().take(512).collect::<String>());
        let too_big = || {
            Failure::fatal(
                TurnErrorKind::Protocol,
                format!(
                    "{method} {url}: reply exceeded {} bytes (max_response_bytes)",
                    self.max_body
                ),
            )
        };
        if resp.content_length().is_some_and(|n| n > self.max_body) {
            return Err(too_big());
        }
        if let Some(sink) = sink
            && status.is_success()
        {
            return self.stream(req, resp, sink).map(|()| String::new());
        }
        let mut bytes = Vec::new();
        resp.take(self.max_body.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| {
                let timed_out = e.kind() == std::io::ErrorKind::TimedOut
                    || chain(&e).contains("timed out")
                    || chain(&e).contains("operation timed out");
                let (kind, what) = if timed_out {
                    (
                        TurnErrorKind::Timeout,
                        "timed out reading the body".to_owned(),
                    )
                } else {
                    (
                        TurnErrorKind::Transport,
                        format!("reading the body: {}", chain(&e)),
                    )
                };
                Failure::fatal(kind, format!("{method} {url}: {what}"))
            })?;
        if bytes.len() as u64 > self.max_body {
            return Err(too_big());
        }
        let text = String::from_utf8(bytes)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
        if status.is_success() {
            return Ok(text);
        }
        let code = status.as_u16();
        if status.is_redirection() {
            let location = resp_location.as_deref().unwrap_or("nowhere");
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
        let body = self.redactor.excerpt(text.trim(), ERROR_BODY_EXCERPT);
        let retryable = code == 429 || status.is_server_error();
        Err(Failure {
            error: TurnError::new(
                TurnErrorKind::Transport,
                format!("{method} {url}: HTTP {code}: {body}"),
            ),
            retryable,
            retry_after: retry_after.filter(|_| code == 429 || code == 503),
            status: Some(code),
        })
    }

    /// Hands a 2xx reply to `sink` as it arrives, within `max_response_bytes`.
    fn stream(
        &self,
        req: &Request<'_>,
        mut resp: reqwest::blocking::Response,
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
        let mut chunk = vec![0u8; 16 << 10];
        loop {
            let n = match resp.read(&mut chunk) {
                Ok(0) => return Ok(()),
                Ok(n) => n,
                Err(e) => {
                    let what = if e.kind() == std::io::ErrorKind::TimedOut
                        || chain(&e).contains("timed out")
                    {
                        (TurnErrorKind::Timeout, "timed out reading the body".into())
                    } else {
                        (
                            TurnErrorKind::Transport,
                            format!("reading the body: {}", chain(&e)),
                        )
                    };
                    return Err(Failure::fatal(
                        what.0,
                        format!("{method} {url}: {}", what.1),
                    ));
                }
            };
            total += n as u64;
            if total > self.max_body {
                return Err(Failure::fatal(
                    TurnErrorKind::Protocol,
                    format!(
                        "{method} {url}: reply exceeded {} bytes (max_response_bytes)",
                        self.max_body
                    ),
                ));
            }
            if !sink.chunk(&chunk[..n]) {
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
mod tests {
    use super::*;

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
