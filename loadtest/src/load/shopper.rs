//! A virtual shopper: joins the line, polls when told, maybe gives up or
//! refreshes impatiently, checks out with an Idempotency-Key once let in
//! (retrying a lost answer with the same key), and follows the order until
//! it is final. Every loop is bounded in count and in time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::balancer::{Balancer, Sticky};
use super::http::{send, Reply};
use super::record::{OrderSeen, Outcome, Recorder, Unanswered};
use super::scenario::{Behaviour, Scenario};

/// How long an impatient shopper waits before polling again, too early.
pub const IMPATIENT_AFTER: Duration = Duration::from_millis(150);
/// Pause after a failed request (timeout, refused connection, 5xx).
pub const BACKOFF: Duration = Duration::from_millis(500);
/// Longest `Retry-After` a shopper honours before trying again.
pub const RETRY_AFTER_MAX: Duration = Duration::from_secs(10);
/// How long a shopper keeps retrying a checkout answered `409` (its key
/// still in flight) before giving up.
pub const CONFLICT_WAIT_MAX: Duration = Duration::from_secs(90);
/// Between two `GET /orders/{id}` while an order is not final.
pub const ORDER_POLL_EVERY: Duration = Duration::from_millis(500);

/// Order states after which nothing more happens to an order.
pub const FINAL_STATES: [&str; 7] = [
    "confirmed",
    "declined",
    "cancelled",
    "expired",
    "refunded",
    "voided",
    "rejected",
];

/// One shopper's choices, drawn from the scenario seed before the run.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub index: u32,
    pub arrive_at_s: f64,
    pub sku: String,
    pub quantity: u32,
    pub payment_method: String,
    /// Stops polling after this many polls (people who give up).
    pub gives_up_after_polls: Option<u32>,
    /// Polls again at once after joining.
    pub impatient: bool,
}

/// Every shopper's plan, from the scenario and the arrival times.
pub fn plans(scenario: &Scenario, arrivals: &[f64]) -> Vec<Plan> {
    let b = &scenario.shoppers;
    arrivals
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            let index = i as u32;
            let mut rng = ChaCha8Rng::seed_from_u64(
                scenario.seed ^ (u64::from(index) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            let sku = pick(
                &mut rng,
                scenario.products.iter().map(|p| (p.sku.as_str(), p.weight)),
            );
            let payment_method = pick(
                &mut rng,
                b.payment_methods.iter().map(|(m, w)| (m.as_str(), *w)),
            );
            let quantity = rng.random_range(1..=b.quantity_max);
            let gives_up_after_polls =
                (rng.random::<f64>() < b.give_up_probability).then(|| rng.random_range(0..3));
            let impatient = rng.random::<f64>() < b.impatient_probability;
            Plan {
                index,
                arrive_at_s: t,
                sku,
                quantity,
                payment_method,
                gives_up_after_polls,
                impatient,
            }
        })
        .collect()
}

/// A weighted choice; the weights were validated (≥ 0, one positive).
fn pick<'a>(rng: &mut ChaCha8Rng, items: impl Iterator<Item = (&'a str, f64)> + Clone) -> String {
    let total: f64 = items.clone().map(|(_, w)| w).sum();
    let mut x = rng.random::<f64>() * total;
    let mut last = "";
    for (name, w) in items {
        if w <= 0.0 {
            continue;
        }
        last = name;
        if x < w {
            return name.to_string();
        }
        x -= w;
    }
    last.to_string()
}

/// What every shopper shares.
pub struct Shared {
    pub http: reqwest::Client,
    /// The gateways, behind a sticky balancer.
    pub lb: Arc<Balancer>,
    pub room: String,
    /// Something is on sale: admitted shoppers check out (a rooms-only
    /// rehearsal ends the visit at admission).
    pub sells: bool,
    /// How much further back a moved shopper's place may look at its new
    /// gateway (the gateways' views of the line differ by up to one
    /// tick's releases).
    pub place_slack: u64,
    pub behaviour: Behaviour,
    pub rec: Arc<Recorder>,
    /// Shoppers stop at this instant, whatever they are doing.
    pub deadline: Instant,
    /// Prefix of Idempotency-Keys, unique per run.
    pub run_id: String,
    /// The room runs as a campaign (`[event]`): what shoppers see of it
    /// is recorded for the [`super::event_day`] checks.
    pub event: bool,
    /// What a join must carry: the room's challenge, an enqueue token.
    pub door: Door,
}

/// What the room asks of a join, and how fast a shopper's phone solves.
#[derive(Debug, Clone, Default)]
pub struct Door {
    /// The room has a pow challenge.
    pub challenge: bool,
    /// The store's key: each shopper joins with a token for its own
    /// account, `shopper-<index>`.
    pub store_key: Option<String>,
    pub phone_hashes_per_second: f64,
}

/// Plays one shopper to the end of the visit.
pub async fn run(shared: Arc<Shared>, plan: Plan) -> Outcome {
    let mut at = Sticky::new(&shared.lb, plan.index);
    let outcome = match visit(&shared, &plan, &mut at).await {
        Ok(o) | Err(o) => o,
    };
    shared.rec.outcome(outcome);
    outcome
}

/// `Err` ends the visit early with that outcome.
async fn visit(s: &Shared, plan: &Plan, at: &mut Sticky) -> Result<Outcome, Outcome> {
    let joined_at = Instant::now();
    let pass = wait_in_line(s, plan, at).await?;
    s.rec.admitted(joined_at.elapsed().as_secs_f64());
    if !s.sells {
        return Ok(Outcome::Admitted);
    }
    let (order_id, state) = checkout(s, plan, &pass, at).await?;
    let state = follow_order(s, &pass, &order_id, state, at).await?;
    Ok(outcome_of(&state))
}

/// Sends the request `build` makes for the shopper's gateway's base URL,
/// through the balancer: counted under `route` and under that gateway; a
/// request with no HTTP answer moves the shopper on. The reply and the
/// gateway that was asked.
pub(crate) async fn call(
    s: &Shared,
    at: &mut Sticky,
    route: &str,
    build: impl FnOnce(&str) -> reqwest::RequestBuilder,
) -> (Reply, usize) {
    let g = at.pick(&s.lb);
    let r = send(&s.rec, route, build(s.lb.public(g))).await;
    s.rec
        .gateway_reply(g, r.status, r.elapsed.as_secs_f64() * 1000.0);
    if r.status == 0 {
        at.failed(&s.lb);
    }
    (r, g)
}

fn outcome_of(state: &str) -> Outcome {
    match state {
        "confirmed" => Outcome::Confirmed,
        "declined" => Outcome::Declined,
        "rejected" => Outcome::Rejected,
        "expired" => Outcome::Expired,
        _ => Outcome::OtherFinal,
    }
}

/// Sleeps `d`, or fails the visit if the run's deadline comes first.
pub(crate) async fn pause(s: &Shared, d: Duration) -> Result<(), Outcome> {
    let now = Instant::now();
    if now + d >= s.deadline {
        tokio::time::sleep_until(s.deadline.into()).await;
        return Err(Outcome::Failed);
    }
    tokio::time::sleep(d).await;
    Ok(())
}

fn told(reply: &Reply, default: Duration) -> Duration {
    reply.retry_after().unwrap_or(default).min(RETRY_AFTER_MAX)
}

/// A virtual shopper's own address, in the benchmarking range
/// 198.18.0.0/15 (RFC 2544). The harness's gateway trusts loopback as a
/// proxy, so this `X-Forwarded-For` is the client the join limiter sees:
/// one budget per shopper, as behind a real CDN.
pub fn shopper_address(index: u32) -> std::net::Ipv4Addr {
    std::net::Ipv4Addr::from(0xC612_0000 | (index % 0x2_0000))
}

/// Joins, polls as told, rejoins when the ticket is lost; the pass. Each
/// ticket's life is recorded (for the FIFO check), and so is the place of
/// a shopper who moved gateways while waiting.
async fn wait_in_line(s: &Shared, plan: &Plan, at: &mut Sticky) -> Result<String, Outcome> {
    let mut ticket_n: Option<usize> = None;
    let r = line(s, plan, at, &mut ticket_n).await;
    if let Some(n) = ticket_n {
        s.rec.ticket_end(n, r.is_ok());
    }
    r
}

async fn line(
    s: &Shared,
    plan: &Plan,
    at: &mut Sticky,
    ticket_n: &mut Option<usize>,
) -> Result<String, Outcome> {
    let b = &s.behaviour;
    let mut polls = 0u32;
    let mut joins = 0u32;
    // A rejoin is a join after a ticket was lost (restart, expiry), not a
    // join retried after 429/503.
    let mut had_ticket = false;
    let join_path = format!("/queue/{}/join", s.room);
    let status_path = format!("/queue/{}/status", s.room);
    'join: loop {
        if joins >= b.joins_max {
            return Err(Outcome::Failed);
        }
        joins += 1;
        let join_sent = Instant::now();
        // When the shopper last asked and heard it was still waiting: a
        // pass it gets later was released after this.
        let mut waiting_at_s = s.rec.now_s();
        let Some(body) = door(s, plan, at).await? else {
            continue;
        };
        let (r, g) = call(s, at, "join", |base| {
            let req = s
                .http
                .post(format!("{base}{join_path}"))
                .header("x-forwarded-for", shopper_address(plan.index).to_string());
            match &body {
                Some(b) => req
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(b.to_string()),
                None => req,
            }
        })
        .await;
        if s.event {
            event_seen(s, &r);
        }
        let (ticket, mut poll_after) = match r.status {
            202 | 200 => match r.str("ticket") {
                Some(t) => (t.to_string(), poll_after(&r)),
                None => return Err(Outcome::Failed),
            },
            410 if r.str("error") == Some("event_closed") => return Err(Outcome::Closed),
            410 => return Err(Outcome::SoldOut),
            429 | 503 => {
                pause(s, told(&r, Duration::from_secs(1))).await?;
                continue;
            }
            _ => {
                pause(s, BACKOFF).await?;
                continue;
            }
        };
        let pre_queue_seq = (s.event && r.body["pre_queue"] == true)
            .then(|| ticket_seq(&ticket))
            .flatten();
        if let Some(seq) = pre_queue_seq {
            s.rec.with(|i| i.event.pre_queue_seqs.push(seq));
        }
        if had_ticket {
            s.rec.with(|i| i.rejoins += 1);
        }
        had_ticket = true;
        if let Some(old) = ticket_n.replace(s.rec.ticket(plan.index, g)) {
            s.rec.ticket_end(old, false);
        }
        // Where the shopper stood at its last answer, and the moves so far
        // then: a poll answered after a move must show the same place or
        // a better one.
        let mut place = (
            r.body.get("ahead").and_then(serde_json::Value::as_u64),
            at.moves,
        );
        if plan.impatient && joins == 1 {
            let joined_on = g;
            pause(s, IMPATIENT_AFTER).await?;
            let (r, g) = call(s, at, "status", |base| {
                s.http
                    .get(format!("{base}{status_path}"))
                    .bearer_auth(&ticket)
            })
            .await;
            match (r.status, r.str("state")) {
                (429, _) => s.rec.with(|i| i.held_back += 1),
                // A gateway that did not answer the join has not seen the
                // ticket's poll_after_s (the fleet keeps no per-shopper
                // record): its one unchecked poll is the design, not a miss.
                // Served: a miss only if it surely reached the gateway
                // before the time its join's answer told (that answer left
                // after the join was sent; this poll arrived before its
                // own answer came back), less the gateway's slack. On a
                // saturated machine answers arrive seconds late and the
                // early refresh is on time by the gateway's clock.
                (200, Some("waiting")) if g == joined_on => {
                    if surely_early(join_sent, poll_after, Instant::now()) {
                        s.rec.with(|i| i.impatient_served += 1);
                    } else {
                        s.rec.with(|i| i.impatient_late += 1);
                    }
                }
                // Already let in: the refresh shows the pass.
                (200, Some("admitted")) => {
                    if let Some(pass) = r.str("pass") {
                        s.rec.gateway_admission(g);
                        admitted_seen(s, pre_queue_seq, waiting_at_s);
                        return Ok(pass.to_string());
                    }
                }
                _ => {}
            }
        }
        loop {
            if polls >= b.polls_max {
                return Err(Outcome::Failed);
            }
            if plan.gives_up_after_polls.is_some_and(|k| polls >= k) {
                return Err(Outcome::Abandoned);
            }
            let jitter = Duration::from_millis(u64::from(plan.index % 250));
            pause(s, poll_after + jitter).await?;
            polls += 1;
            let sent_s = s.rec.now_s();
            let (r, g) = call(s, at, "status", |base| {
                s.http
                    .get(format!("{base}{status_path}"))
                    .bearer_auth(&ticket)
            })
            .await;
            if r.status != 0 && place.1 != at.moves {
                check_place(s, plan, &r, place.0);
            }
            if r.status == 200 && s.event {
                event_seen(s, &r);
                if matches!(r.str("state"), Some("waiting" | "paused")) {
                    waiting_at_s = sent_s;
                }
            }
            if r.status == 200 {
                let ahead = r.body.get("ahead").and_then(serde_json::Value::as_u64);
                place = (ahead.or(place.0), at.moves);
                if matches!(r.str("state"), Some("waiting" | "paused")) {
                    if let Some(n) = *ticket_n {
                        s.rec.ticket_waiting(n, sent_s);
                    }
                }
            }
            match (r.status, r.str("state")) {
                (200, Some("admitted")) => match r.str("pass") {
                    Some(pass) => {
                        s.rec.gateway_admission(g);
                        admitted_seen(s, pre_queue_seq, waiting_at_s);
                        return Ok(pass.to_string());
                    }
                    None => return Err(Outcome::Failed),
                },
                (200, Some("sold_out")) => return Err(Outcome::SoldOut),
                (200, Some("closed")) => {
                    s.rec.with(|i| i.event.told_closed += 1);
                    return Err(Outcome::Closed);
                }
                (200, Some("expired")) | (401, _) => {
                    let why = match r.status {
                        200 => "expired".to_string(),
                        _ => format!("401 {}", r.str("error").unwrap_or_default()),
                    };
                    s.rec.ticket_lost(why);
                    continue 'join;
                }
                (200, _) => poll_after = poll_after_of(&r, poll_after),
                (429, _) => poll_after = told(&r, Duration::from_secs(1)),
                _ => poll_after = BACKOFF,
            }
        }
    }
}

/// The join's body when the room asks for more than a bare join: the
/// shopper's enqueue token, and a challenge solved at a phone's pace (the
/// harness finds the solution, then waits out the rest of the time the
/// phone's `phone_hashes_per_second` would have taken for as many tries).
/// `Ok(None)`: no challenge this time (the shopper paused; join again).
async fn door(
    s: &Shared,
    plan: &Plan,
    at: &mut Sticky,
) -> Result<Option<Option<serde_json::Value>>, Outcome> {
    let d = &s.door;
    if !d.challenge && d.store_key.is_none() {
        return Ok(Some(None));
    }
    let mut body = serde_json::Map::new();
    if let Some(key) = &d.store_key {
        let account = format!("shopper-{}", plan.index);
        body.insert(
            "enqueue_token".into(),
            super::store::enqueue_token(key, &s.room, &account).into(),
        );
    }
    if d.challenge {
        let (r, _) = call(s, at, "challenge", |base| {
            s.http
                .get(format!("{base}/queue/{}/challenge", s.room))
                .header("x-forwarded-for", shopper_address(plan.index).to_string())
        })
        .await;
        let (Some(challenge), Some(bits)) = (
            r.str("challenge").map(str::to_string),
            r.body["difficulty_bits"].as_u64(),
        ) else {
            pause(s, told(&r, BACKOFF)).await?;
            return Ok(None);
        };
        let started = Instant::now();
        let deadline = s.deadline;
        let c = challenge.clone();
        let solved = tokio::task::spawn_blocking(move || {
            let bits = u8::try_from(bits).unwrap_or(u8::MAX);
            super::pow::solve(&c, bits, 0, u64::MAX, &|| Instant::now() >= deadline)
        })
        .await
        .ok()
        .flatten()
        .ok_or(Outcome::Failed)?;
        let phone_s = solved.tries as f64 / d.phone_hashes_per_second;
        s.rec.with(|i| i.farm.honest_solve_s.push(phone_s));
        pause(
            s,
            Duration::from_secs_f64(phone_s).saturating_sub(started.elapsed()),
        )
        .await?;
        body.insert("challenge".into(), challenge.into());
        body.insert("solution".into(), solved.solution.into());
    }
    Ok(Some(Some(body.into())))
}

/// A campaign's answer as a shopper saw it: a refused early join, a
/// ticket, the close, the room's message and the draw.
fn event_seen(s: &Shared, r: &Reply) {
    let at = s.rec.now_s();
    s.rec.with(|i| {
        let e = &mut i.event;
        match (r.status, r.str("error")) {
            (503, Some("not_open")) => e.not_open_s.push(at),
            (410, Some("event_closed")) => e.closed_joins += 1,
            (202, _) => e.tickets_s.push(at),
            _ => {}
        }
        if r.status == 200 || r.status == 202 {
            let message = r.str("message").unwrap_or_default().to_string();
            let seen = e.messages.entry(message).or_insert((at, at));
            seen.0 = seen.0.min(at);
            seen.1 = seen.1.max(at);
            if let Some(commitment) = r.str("draw_commitment") {
                // Entrants are told while the pre-queue fills (the most
                // seen is the final count); the seed once it is revealed.
                let draw = e
                    .draw
                    .get_or_insert_with(|| (commitment.to_string(), None, 0));
                if let Some(n) = r.body["entrants"].as_u64() {
                    draw.2 = draw.2.max(n);
                }
                if let Some(seed) = r.str("draw_seed") {
                    draw.1 = Some(seed.to_string());
                }
            }
        }
    });
}

/// A pass received: released after `waiting_at_s` (the shopper's last
/// poll told to wait was sent then) and by now; for a pre-queue ticket,
/// with its `seq`.
fn admitted_seen(s: &Shared, pre_queue_seq: Option<u64>, waiting_at_s: f64) {
    if !s.event {
        return;
    }
    let released = (waiting_at_s, s.rec.now_s());
    s.rec.with(|i| {
        i.event.admitted_s.push(released);
        if let Some(seq) = pre_queue_seq {
            i.event.pre_queue_admitted.push((seq, released));
        }
    });
}

/// The `seq` claim of a ticket (its payload is read, not verified: the
/// harness only needs the number the gateway put there).
pub fn ticket_seq(ticket: &str) -> Option<u64> {
    use base64::Engine;
    let payload = ticket.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()?
        .get("seq")?
        .as_u64()
}

/// The first answer at a new gateway to a shopper who moved while
/// waiting: its ticket must be honoured and its place no worse than at the
/// old gateway (`ahead` then), within `place_slack`.
fn check_place(s: &Shared, plan: &Plan, r: &Reply, ahead_before: Option<u64>) {
    let state = r.str("state").unwrap_or_default();
    let ahead = r.body.get("ahead").and_then(serde_json::Value::as_u64);
    let lost = match (r.status, state) {
        (401, _) | (200, "expired") => Some(format!(
            "shopper {} moved gateways and its ticket was refused ({} {state})",
            plan.index, r.status
        )),
        (200, "waiting" | "paused") => match (ahead_before, ahead) {
            (Some(before), Some(now)) if now > before + s.place_slack => Some(format!(
                "shopper {} moved gateways: {before} ahead before, {now} after",
                plan.index
            )),
            _ => None,
        },
        _ => None,
    };
    s.rec.with(|i| {
        if r.status == 200 || r.status == 401 {
            i.moved_waiting += 1;
        }
        if let Some(l) = lost {
            i.places_lost.push(l);
        }
    });
}

/// Slack the line gives a poll before its time (the fleet's
/// `sluice_admission::fleet::POLL_SLACK_MS`, the embedded room's
/// `POLL_SLACK_S`), plus the embedded room's clock: it keeps a ticket's
/// last poll and due time in whole room seconds, so a join answered just
/// before a second ends is due up to one second sooner than its
/// `poll_after_s` says (seen in CI-like runs: a refresh 1.0x s after such
/// a join was served, rightly by the room's clock).
const POLL_SLACK: Duration = Duration::from_millis(2000);

/// A poll answered at `answered` surely reached the gateway before the
/// time the answer to a join sent at `join_sent` told it (`poll_after`
/// from that answer's leaving, so at least from `join_sent`), beyond the
/// line's slack.
fn surely_early(join_sent: Instant, poll_after: Duration, answered: Instant) -> bool {
    answered + POLL_SLACK < join_sent + poll_after
}

fn poll_after(r: &Reply) -> Duration {
    poll_after_of(r, Duration::from_secs(2))
}

fn poll_after_of(r: &Reply, default: Duration) -> Duration {
    r.body
        .get("poll_after_s")
        .and_then(serde_json::Value::as_f64)
        .map_or(default, Duration::from_secs_f64)
        .min(Duration::from_secs(300))
}

/// `POST /checkout` with one Idempotency-Key, retried on a lost answer;
/// the order id and its state.
pub(crate) async fn checkout(
    s: &Shared,
    plan: &Plan,
    pass: &str,
    at: &mut Sticky,
) -> Result<(String, String), Outcome> {
    let key = format!("{}-{:07}", s.run_id, plan.index);
    let body =
        json!({"sku": plan.sku, "quantity": plan.quantity, "payment_method": plan.payment_method})
            .to_string();
    // A `409` (the same key still in flight) does not use up an attempt:
    // the first request may have died with a crashed process, and its lock
    // goes stale on its own. Waiting for it is bounded in time instead.
    let mut failures = 0u32;
    let mut first_conflict: Option<Instant> = None;
    let mut sent = 0u32;
    // Until a final answer arrives, the books know this key is open: if
    // every attempt is lost (or the run ends mid-call), they replay it.
    s.rec.with(|i| {
        i.unanswered.insert(
            key.clone(),
            Unanswered {
                pass: pass.to_string(),
                body: body.clone(),
                sku: plan.sku.clone(),
                quantity: plan.quantity,
            },
        )
    });
    let answered = || {
        s.rec.with(|i| i.unanswered.remove(&key));
    };
    // A refusal after a lost attempt does not say the lost one made no
    // order: the books replay the key to find out.
    let refused = |failures: u32| {
        if failures == 0 {
            answered();
        }
    };
    loop {
        if failures >= s.behaviour.checkout_attempts_max {
            return Err(Outcome::Failed);
        }
        if sent > 0 {
            s.rec.with(|i| i.checkout_retries += 1);
        }
        sent += 1;
        let sent_s = s.rec.now_s();
        let (r, g) = call(s, at, "checkout", |base| {
            s.http
                .post(format!("{base}/checkout"))
                .bearer_auth(pass)
                .header("idempotency-key", &key)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone())
        })
        .await;
        if r.status == 0 {
            s.rec.gateway_checkout_lost(g, sent_s);
        } else {
            s.rec.checkout_latency(r.elapsed.as_secs_f64() * 1000.0);
        }
        s.rec.checkout_call(r.status);
        match r.status {
            200 | 201 => {
                answered();
                let (Some(id), Some(state)) = (r.str("order_id"), r.str("state")) else {
                    return Err(Outcome::Failed);
                };
                s.rec.order(
                    &key,
                    OrderSeen {
                        order_id: id.to_string(),
                        sku: plan.sku.clone(),
                        quantity: plan.quantity,
                        state: state.to_string(),
                        acked_at_s: s.rec.now_s(),
                        gateway: g,
                        pass: pass.to_string(),
                        present: true,
                    },
                );
                return Ok((id.to_string(), state.to_string()));
            }
            409 => {
                let since = *first_conflict.get_or_insert_with(Instant::now);
                if since.elapsed() >= CONFLICT_WAIT_MAX {
                    return Err(Outcome::Failed);
                }
                pause(s, told(&r, Duration::from_secs(1))).await?;
            }
            410 => {
                refused(failures);
                return Err(Outcome::SoldOut);
            }
            422 => {
                refused(failures);
                s.rec.with(|i| {
                    i.anomalies.push(format!(
                        "Idempotency-Key {key}: the same body was refused as a mismatch"
                    ))
                });
                return Err(Outcome::Failed);
            }
            0 | 429 | 500..=599 => {
                failures += 1;
                pause(s, BACKOFF * failures).await?;
            }
            _ => {
                refused(failures);
                return Err(Outcome::Failed);
            }
        }
    }
}

/// Polls `GET /orders/{id}` until the order is final; its final state.
pub(crate) async fn follow_order(
    s: &Shared,
    pass: &str,
    order_id: &str,
    mut state: String,
    at: &mut Sticky,
) -> Result<String, Outcome> {
    let mut polls = 0;
    while !FINAL_STATES.contains(&state.as_str()) {
        if polls >= s.behaviour.order_polls_max {
            return Err(Outcome::Failed);
        }
        polls += 1;
        pause(s, ORDER_POLL_EVERY).await?;
        let (r, _) = call(s, at, "order", |base| {
            s.http
                .get(format!("{base}/orders/{order_id}"))
                .bearer_auth(pass)
        })
        .await;
        if let (200, Some(st)) = (r.status, r.str("state")) {
            state = st.to_string();
            s.rec.order_state(order_id, &state);
        }
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_refresh_is_a_miss_only_when_surely_before_its_time() {
        let sent = Instant::now();
        let after = Duration::from_secs(3);
        let ms = |m| sent + Duration::from_millis(m);
        // Join and refresh answered at once: 150 ms after, surely early.
        assert!(surely_early(sent, after, ms(300)));
        // Within the line's 1 s slack and the room's whole-second clock
        // of the earliest possible due time.
        assert!(surely_early(sent, after, ms(999)));
        assert!(!surely_early(sent, after, ms(1_000)));
        // The join's answer took 4 s to come back: the refresh may be on
        // time by the gateway's clock.
        assert!(!surely_early(sent, after, ms(4_150)));
    }

    #[test]
    fn each_shopper_has_its_own_benchmarking_address() {
        let addresses: std::collections::HashSet<_> = (0..0x2_0000).map(shopper_address).collect();
        assert_eq!(addresses.len(), 0x2_0000);
        assert!(addresses.iter().all(|a| {
            let [a, b, ..] = a.octets();
            a == 198 && (b == 18 || b == 19)
        }));
    }

    fn scenario() -> Scenario {
        Scenario::parse(
            r#"
name = "t"
seed = 9
[limits]
max_shoppers = 1000
max_duration_s = 30
[gateway]
release_per_second = 5
max_active = 10
[[products]]
sku = "a"
stock = 3
weight = 3
[[products]]
sku = "b"
stock = 3
weight = 1
[arrivals]
profile = "spike"
shoppers = 1000
over_s = 1
[shoppers]
give_up_probability = 0.2
impatient_probability = 0.1
payment_methods = { pm_ok = 0.9, pm_decline = 0.1 }
"#,
            "t.toml",
        )
        .unwrap()
    }

    #[test]
    fn plans_replay_from_the_seed_and_follow_the_shares() {
        let s = scenario();
        let times: Vec<f64> = (0..1000).map(|i| f64::from(i) / 1000.0).collect();
        let a = plans(&s, &times);
        assert_eq!(a, plans(&s, &times));
        let share = |f: &dyn Fn(&Plan) -> bool| a.iter().filter(|p| f(p)).count() as f64 / 1000.0;
        assert!((share(&|p| p.sku == "a") - 0.75).abs() < 0.05);
        assert!((share(&|p| p.payment_method == "pm_decline") - 0.1).abs() < 0.03);
        assert!((share(&|p| p.gives_up_after_polls.is_some()) - 0.2).abs() < 0.04);
        assert!((share(&|p| p.impatient) - 0.1).abs() < 0.03);
    }
}
