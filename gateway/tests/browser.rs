//! The queue page in a real browser (Debian's headless Chromium, driven
//! over WebDriver): join, wait, admitted and moved on, paused, sold out,
//! queue full.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use fantoccini::{Client, ClientBuilder, Locator};

struct Browser {
    driver: Child,
    client: Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// A fresh headless Chromium with its own profile, or None when the
    /// machine has none (only allowed outside the test command).
    async fn start(lang: &str) -> Option<Browser> {
        // chromedriver binds the port it is given; if someone took it in
        // between, it exits, and it gets another one.
        let mut started = None;
        for _ in 0..5 {
            let port = free_port();
            let mut driver = match Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
            {
                Ok(d) => d,
                Err(e) => {
                    assert!(
                        std::env::var_os("SLUICE_REQUIRE_TOOLS").is_none(),
                        "chromedriver is required: {e}"
                    );
                    eprintln!("chromedriver not installed, skipping the browser test");
                    return None;
                }
            };
            match wait_listening(&mut driver, &[port], Duration::from_secs(10), || false) {
                Started::Listening => {
                    started = Some((driver, port));
                    break;
                }
                Started::Exited => continue,
                other => {
                    let _ = driver.kill();
                    let _ = driver.wait();
                    panic!("chromedriver did not start: {other:?}");
                }
            }
        }
        let (driver, port) = started.expect("chromedriver got a port of its own");
        let profile = tempfile::tempdir().unwrap();
        let caps = serde_json::json!({
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    format!("--lang={lang}"), format!("--user-data-dir={}", profile.path().display()),
                    "--window-size=800,900",
                ],
                "prefs": {"intl.accept_languages": lang},
            }
        });
        let caps: serde_json::Map<String, serde_json::Value> = caps.as_object().unwrap().clone();
        let url = format!("http://127.0.0.1:{port}");
        let mut client = None;
        for _ in 0..100 {
            match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
                .capabilities(caps.clone())
                .connect(&url)
                .await
            {
                Ok(c) => {
                    client = Some(c);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
        Some(Browser {
            driver,
            client: client.expect("chromedriver answers"),
            _profile: profile,
        })
    }

    /// The page's announced state (`data-state` of the live region) once
    /// it equals `want`, within `within`.
    async fn wait_state(&self, want: &str, within: Duration) -> String {
        let deadline = std::time::Instant::now() + within;
        let mut last = String::new();
        while std::time::Instant::now() < deadline {
            if let Ok(el) = self.client.find(Locator::Id("state")).await {
                last = el
                    .attr("data-state")
                    .await
                    .ok()
                    .flatten()
                    .unwrap_or_default();
                if last == want {
                    return el.text().await.unwrap_or_default();
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("page state is {last:?}, expected {want:?}");
    }

    async fn close(self) {
        let _ = self.client.clone().close().await;
        // Drop kills chromedriver and whatever Chromium left behind.
    }
}

/// A test that panics never reaches `close`: without this, chromedriver's
/// Chromium (browser, zygotes, renderers) outlived the test run.
impl Drop for Browser {
    fn drop(&mut self) {
        let root = self.driver.id();
        // Chromium's processes are chromedriver's descendants; some of them
        // re-parent to init once the browser dies, so gather them first.
        let doomed = descendants(root);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        for pid in doomed {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// Every process below `root` (children, their children, ...), read from
/// `/proc/*/stat`'s parent field.
fn descendants(root: u32) -> Vec<u32> {
    let mut parents: Vec<(u32, u32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        if let Some(ppid) = after.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            parents.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    found.remove(0);
    found
}

fn gateway(extra: &str) -> Gateway {
    gateway_passing(3, extra)
}

/// The test room with passes (and so the window to collect a released
/// place) lasting `pass_ttl_s`.
fn gateway_passing(pass_ttl_s: u64, extra: &str) -> Gateway {
    Gateway::start(GatewayOptions {
        rest: format!(
            "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\"]\nrelease_per_second = 20\nmax_active = 1\nqueue_capacity = 5\npass_ttl_s = {pass_ttl_s}\npoll_min_s = 1\npoll_max_s = 5\n{extra}"
        ),
        ..Default::default()
    })
}

#[tokio::test]
async fn a_shopper_waits_is_admitted_and_moves_on() {
    let gw = gateway("");
    // Someone already holds the only active pass, for 3 seconds.
    let first: serde_json::Value = client()
        .post(gw.url("/queue/drop/join"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Polls when told to, as the page does.
    let poll_after_s = first["poll_after_s"].as_u64().unwrap();
    tokio::time::sleep(Duration::from_secs(poll_after_s)).await;
    let s: serde_json::Value = client()
        .get(gw.url("/queue/drop/status"))
        .bearer_auth(first["ticket"].as_str().unwrap())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(s["state"], "admitted");

    let Some(browser) = Browser::start("en-US").await else {
        return;
    };
    browser
        .client
        .goto(&gw.url("/queue/drop?next=/index.html"))
        .await
        .unwrap();
    let text = browser.wait_state("waiting", Duration::from_secs(5)).await;
    assert_eq!(text, "You are in line.");
    let position = browser
        .client
        .find(Locator::Id("position"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(position, "1");
    let live = browser.client.find(Locator::Id("state")).await.unwrap();
    assert_eq!(
        live.attr("aria-live").await.unwrap().as_deref(),
        Some("polite")
    );
    if let Ok(dir) = std::env::var("SLUICE_SCREENSHOT_DIR") {
        let png = browser.client.screenshot().await.unwrap();
        std::fs::write(std::path::Path::new(&dir).join("queue-page.png"), png).unwrap();
    }

    // The first pass runs out; the page lets this shopper in by itself.
    browser
        .wait_state("admitted", Duration::from_secs(12))
        .await;
    let mut moved = false;
    for _ in 0..50 {
        let url = browser.client.current_url().await.unwrap();
        if url.path() == "/index.html" {
            moved = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(moved, "the page moves the shopper on when admitted");
    browser.close().await;
}

/// A shopper who opens a protected page without a pass is sent to the
/// queue and, once admitted, back to the very page and query it asked for.
#[tokio::test]
async fn a_shopper_sent_to_the_queue_comes_back_to_the_page_asked_for() {
    let mut opts = GatewayOptions {
        rest: "[[rooms]]\nname = \"drop\"\nprotect = [\"/members/**\"]\nrelease_per_second = 20\nmax_active = 5\nqueue_capacity = 5\npoll_min_s = 1\npoll_max_s = 5\n".into(),
        ..Default::default()
    };
    opts.static_files.push((
        "members/deal.html",
        b"<!doctype html><title>Deal</title><h1 id=deal>Members deal</h1>".to_vec(),
    ));
    let gw = Gateway::start(opts);
    for (lang, admitted) in [("en-US", "It's your turn!"), ("pt-BR", "Chegou a sua vez!")] {
        let Some(browser) = Browser::start(lang).await else {
            return;
        };
        comes_back(&gw, &browser, admitted).await;
        browser.close().await;
    }
}

async fn comes_back(gw: &Gateway, browser: &Browser, admitted: &str) {
    let c = &browser.client;
    c.goto(&gw.url("/members/deal.html?src=mail"))
        .await
        .unwrap();
    let text = browser
        .wait_state("admitted", Duration::from_secs(10))
        .await;
    assert!(text.starts_with(admitted), "{text}");
    let mut back = None;
    for _ in 0..50 {
        let url = c.current_url().await.unwrap();
        if url.path() == "/members/deal.html" {
            back = Some(url);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let back = back.expect("the page sends the admitted shopper back");
    assert_eq!(back.query(), Some("src=mail"));
    // Let through with the pass the page collected, not sent round again.
    let heading = c
        .find(Locator::Id("deal"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(heading, "Members deal");
}

/// Requests for `path` in the gateway's access log.
fn served(gw: &Gateway, path: &str) -> usize {
    let needle = format!("path={path} ");
    gw.log().lines().filter(|l| l.contains(&needle)).count()
}

/// While waiting, the page follows the line on the public (cacheable)
/// watermark and calls `/status` only as a heartbeat and to collect its
/// pass: a page that polled `/status` every `poll_after_s` (1 s here)
/// would call it about ten times.
#[tokio::test]
async fn the_page_follows_the_watermark_and_calls_status_as_a_heartbeat() {
    let gw = Gateway::start(GatewayOptions {
        rest: "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\"]\nrelease_per_second = 20\nmax_active = 1\nqueue_capacity = 5\npass_ttl_s = 10\npoll_min_s = 1\npoll_max_s = 1\nheartbeat_s = 4\n".into(),
        ..Default::default()
    });
    // Someone holds the only active pass, for 10 seconds.
    admitted_pass(&gw.url(""), &client(), "drop").await;
    let status_before = served(&gw, "/queue/drop/status");

    let Some(browser) = Browser::start("en-US").await else {
        return;
    };
    let opened = std::time::Instant::now();
    browser
        .client
        .goto(&gw.url("/queue/drop?next=/index.html"))
        .await
        .unwrap();
    browser.wait_state("waiting", Duration::from_secs(5)).await;
    // Once the page has read the watermark twice, its place is the one
    // the watermark and its ticket's seq give.
    let read_twice = eventually(Duration::from_secs(5), || {
        served(&gw, "/queue/drop/watermark") >= 2
    });
    assert!(read_twice.is_some(), "the page reads the watermark");
    let position = browser
        .client
        .find(Locator::Id("position"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    browser
        .wait_state("admitted", Duration::from_secs(20))
        .await;
    let waited_s = opened.elapsed().as_secs_f64();
    browser.close().await;

    let watermarks = served(&gw, "/queue/drop/watermark");
    let statuses = served(&gw, "/queue/drop/status") - status_before;
    assert!(
        waited_s >= 5.0,
        "the page waited for the slot ({waited_s:.1} s)"
    );
    assert!(
        watermarks as f64 >= (waited_s - 3.0).floor(),
        "{watermarks} watermark reads in {waited_s:.1} s"
    );
    // The status after the join, one heartbeat per 4 s, the collection.
    let most = 2 + (waited_s / 4.0).ceil() as usize;
    assert!(
        statuses <= most,
        "{statuses} status calls in {waited_s:.1} s (at most {most})"
    );
    assert!(statuses >= 1, "the pass was collected at /status");
    assert_eq!(
        position, "1",
        "shown from the watermark and the ticket's seq"
    );
}

#[tokio::test]
async fn paused_sold_out_and_full_are_shown_in_portuguese() {
    let gw = gateway("");
    let Some(browser) = Browser::start("pt-BR").await else {
        return;
    };

    gw.edit_config(|t| t.replace("[gateway]\n", "[gateway]\nadmissions = \"paused\"\n"));
    assert!(
        eventually_async(Duration::from_secs(5), || gw.admin_json("/admin/state")
            ["admissions"]
            == "paused")
        .await
        .is_some()
    );
    browser.client.goto(&gw.url("/queue/drop")).await.unwrap();
    let text = browser.wait_state("paused", Duration::from_secs(5)).await;
    assert!(text.starts_with("As entradas estão pausadas"), "{text}");

    gw.edit_config(|t| {
        t.replace("admissions = \"paused\"", "admissions = \"open\"")
            + "[[products]]\nsku = \"gone\"\nstock = 0\nprice_cents = 1\nroom = \"drop\"\n"
    });
    assert!(
        eventually_async(Duration::from_secs(5), || gw.admin_json("/admin/state")
            ["admissions"]
            == "open")
        .await
        .is_some()
    );
    browser.client.goto(&gw.url("/queue/drop")).await.unwrap();
    let text = browser.wait_state("sold_out", Duration::from_secs(8)).await;
    assert!(text.starts_with("Esgotado"), "{text}");
    browser.close().await;
}

#[tokio::test]
async fn a_full_line_is_said_clearly() {
    // The admitted place is never collected here; it is given up after the
    // claim window (at most the pass), which would let the line move and
    // the page in. A pass of 60 s keeps the line full however slowly the
    // browser loads (with 3 s it once did not, on a loaded CI machine).
    let gw = gateway_passing(60, "");
    let Some(browser) = Browser::start("en-US").await else {
        return;
    };
    // One admitted and five waiting fill the room's capacity of five.
    let join = || client().post(gw.url("/queue/drop/join")).send();
    assert_eq!(join().await.unwrap().status(), 202);
    // Released (its pass is collected at its first poll): out of the line.
    let admitted = eventually_async(Duration::from_secs(5), || {
        gw.admin_json("/admin/state")["rooms"][0]["serving"] == 1
    })
    .await;
    assert!(admitted.is_some(), "the first one is let in");
    for _ in 0..5 {
        assert_eq!(join().await.unwrap().status(), 202);
    }
    browser.client.goto(&gw.url("/queue/drop")).await.unwrap();
    let text = browser
        .wait_state("queue_full", Duration::from_secs(5))
        .await;
    assert!(text.starts_with("The line is full right now."), "{text}");
    browser.close().await;
}

#[tokio::test]
async fn a_shopper_buys_through_the_demo_store() {
    let gw = Gateway::start(GatewayOptions {
        repo_static: true,
        rest: "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\", \"/orders/*\"]\nrelease_per_second = 20\nmax_active = 5\nqueue_capacity = 50\npoll_min_s = 1\npoll_max_s = 5\n\
               [[products]]\nsku = \"sneaker-42\"\nstock = 3\nprice_cents = 19900\nroom = \"drop\"\n"
            .into(),
        ..Default::default()
    });
    let Some(browser) = Browser::start("en-US").await else {
        return;
    };
    let c = &browser.client;
    c.goto(&gw.url("/products/sneaker-42.html")).await.unwrap();
    c.find(Locator::Css("a[href^='/queue/drop']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The waiting room lets the shopper in and sends them on to checkout.
    let mut on_checkout = false;
    for _ in 0..100 {
        if c.current_url().await.unwrap().path() == "/checkout.html" {
            on_checkout = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        on_checkout,
        "never reached checkout: {}",
        c.current_url().await.unwrap()
    );
    c.wait().for_element(Locator::Id("pay")).await.unwrap();
    c.find(Locator::Css("#payment-method option[value='pm_ok']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    c.find(Locator::Id("pay"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut state = String::new();
    while std::time::Instant::now() < deadline {
        state = c
            .find(Locator::Id("order-state"))
            .await
            .unwrap()
            .attr("data-state")
            .await
            .unwrap()
            .unwrap_or_default();
        if state == "confirmed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(state, "confirmed");
    let order_id = c
        .find(Locator::Id("order-id"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!order_id.is_empty());
    let inventory = gw.admin_json("/admin/state")["inventory"][0].clone();
    assert_eq!(inventory["committed"], 1, "{inventory}");
    if let Ok(dir) = std::env::var("SLUICE_SCREENSHOT_DIR") {
        let png = c.screenshot().await.unwrap();
        std::fs::write(std::path::Path::new(&dir).join("checkout-page.png"), png).unwrap();
    }
    browser.close().await;
}

/// The room's message (as text, never markup) and the odds warning, in
/// English and in Portuguese: one unit left and two or more people ahead.
#[tokio::test]
async fn the_message_and_the_odds_are_shown_in_english_and_portuguese() {
    let gw = gateway_passing(
        600,
        "joins_per_minute_per_client = 100000\nshow_units_left = true\nmessage = \"Restock <b>at</b> 14:00\"\n\n[[products]]\nsku = \"shoe\"\nstock = 1\nprice_cents = 100\nroom = \"drop\"\n",
    );
    // One place holds the only slot, two wait ahead of the browser.
    for _ in 0..3 {
        let r = client()
            .post(gw.url("/queue/drop/join"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    for (lang, warning) in [
        (
            "en-US",
            "The people ahead of you will likely buy all the units left.",
        ),
        (
            "pt-BR",
            "As pessoas à sua frente provavelmente vão comprar todas as unidades restantes.",
        ),
    ] {
        let Some(browser) = Browser::start(lang).await else {
            return;
        };
        browser.client.goto(&gw.url("/queue/drop")).await.unwrap();
        browser.wait_state("waiting", Duration::from_secs(5)).await;
        let text_of = |id: &'static str| {
            let client = browser.client.clone();
            async move {
                match client.find(Locator::Id(id)).await {
                    Ok(el) if el.is_displayed().await.unwrap_or(false) => {
                        el.text().await.unwrap_or_default()
                    }
                    _ => String::new(),
                }
            }
        };
        let shown = eventually_await(Duration::from_secs(5), || async {
            text_of("odds").await.starts_with(warning)
        })
        .await;
        assert!(
            shown.is_some(),
            "{lang}: odds shows {:?}",
            text_of("odds").await
        );
        // They stay while the page follows the watermark between its
        // status calls (it reads it within poll_max_s = 5 s here).
        let until = std::time::Instant::now() + Duration::from_secs(7);
        while std::time::Instant::now() < until {
            assert!(text_of("odds").await.starts_with(warning), "{lang}");
            assert_eq!(
                text_of("message").await,
                "Restock <b>at</b> 14:00",
                "{lang}"
            );
            assert_eq!(text_of("units-left").await, "1", "{lang}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        browser.close().await;
    }
}

/// A room that needs the store's enqueue token: the page says to sign in
/// (and does not loop on retries); once the store's sign-in has set the
/// `sluice_enqueue` cookie (`Path=/queue`), the page joins with it.
#[tokio::test]
async fn a_room_for_signed_in_shoppers_says_so_and_joins_with_the_stores_cookie() {
    use base64::Engine;
    const SECRET: &str = "c3RvcmUtZW5xdWV1ZS1zZWNyZXQtMzItYnl0ZXMtb2s";
    let gw = gateway_passing(
        60,
        &format!("[rooms.enqueue]\nrequired = true\n[[rooms.enqueue.keys]]\nkid = \"store\"\nalg = \"HS256\"\nsecret = \"{SECRET}\"\n"),
    );
    let Some(browser) = Browser::start("en-US").await else {
        return;
    };
    browser.client.goto(&gw.url("/queue/drop")).await.unwrap();
    let text = browser.wait_state("error", Duration::from_secs(5)).await;
    assert!(
        text.starts_with("This line is for signed-in shoppers"),
        "{text}"
    );
    // The store's sign-in sets its cookie for the queue's paths.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    header.kid = Some("store".into());
    let key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(SECRET)
        .unwrap();
    let token = jsonwebtoken::encode(
        &header,
        &serde_json::json!({"sub": "shopper-1", "aud": "drop", "iat": now, "exp": now + 600}),
        &jsonwebtoken::EncodingKey::from_secret(&key),
    )
    .unwrap();
    browser
        .client
        .execute(
            "document.cookie = 'sluice_enqueue=' + arguments[0] + '; path=/queue; samesite=lax';",
            vec![serde_json::json!(token)],
        )
        .await
        .unwrap();
    browser.client.goto(&gw.url("/queue/drop")).await.unwrap();
    browser
        .wait_state("admitted", Duration::from_secs(10))
        .await;
    let queued = gw.metric("sluice_queue_joins_total{result=\"queued\",room=\"drop\"}");
    assert_eq!(queued, Some(1.0));
    let refused =
        gw.metric("sluice_queue_joins_total{result=\"enqueue_token_required\",room=\"drop\"}");
    assert_eq!(refused, Some(1.0), "the page did not retry without a token");
    browser.close().await;
}

/// A room that asks a proof of work: the page gets `401
/// challenge_required`, solves the challenge in a Web Worker (showing its
/// tries against the expected number), joins with the solution, and waits
/// in line, all within the page's CSP.
#[tokio::test]
async fn a_shopper_proves_work_in_a_worker_and_joins() {
    let gw = gateway_passing(
        30,
        "[rooms.challenge]\nkind = \"pow\"\ndifficulty_bits = 14\n",
    );
    // Someone holds the only slot: the page's shopper waits in line.
    let http = client();
    let c: serde_json::Value = http
        .get(gw.url("/queue/drop/challenge"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = c["challenge"].as_str().unwrap();
    let solution = sluice_admission::challenge::solve(text, 14, 0, 1 << 26).unwrap();
    let first = http
        .post(gw.url("/queue/drop/join"))
        .json(&serde_json::json!({"challenge": text, "solution": solution}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 202);

    let Some(browser) = Browser::start("en-US").await else {
        return;
    };
    browser.client.goto(&gw.url("/queue/drop")).await.unwrap();
    let text = browser.wait_state("waiting", Duration::from_secs(30)).await;
    assert_eq!(text, "You are in line.");
    let position = browser.client.find(Locator::Id("position")).await.unwrap();
    assert_eq!(position.text().await.unwrap(), "2");
    let work = browser.client.find(Locator::Id("work")).await.unwrap();
    let solved = work.attr("data-solved").await.unwrap().unwrap_or_default();
    assert!(
        !solved.is_empty() && solved.bytes().all(|b| b.is_ascii_digit()),
        "{solved:?}"
    );
    let note = browser.client.find(Locator::Id("work-note")).await.unwrap();
    // Hidden once joined: its text as the page last set it.
    let shown = note.prop("textContent").await.unwrap().unwrap_or_default();
    assert!(shown.contains("of about 16384 tries"), "{shown:?}");
    browser.close().await;
    // One join without a challenge (the page's first), none refused.
    let metrics = gw.metrics_text().await;
    let count = |result: &str| {
        metrics
            .lines()
            .find(|l| {
                l.starts_with("sluice_queue_joins_total{")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(count("challenge_required"), 1.0);
    assert_eq!(count("challenge_failed"), 0.0);
    assert_eq!(count("queued"), 2.0);
}

/// A stand-in for a widget vendor: `/stub.js` (the widget script: once the
/// page shows the widget's element, it calls the element's
/// `data-callback` with the token `yes`) and `/siteverify` (yes to `yes`,
/// for `shop.example`).
fn widget_vendor() -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    use axum::routing::{get, post};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            const STUB: &str = r#"(function () {
  var el = document.querySelector(".cf-turnstile");
  var timer = setInterval(function () {
    if (el && !el.hidden) { clearInterval(timer); el.setAttribute("data-rendered", "1"); window[el.getAttribute("data-callback")]("yes"); }
  }, 50);
})();"#;
            let app = axum::Router::new()
                .route(
                    "/stub.js",
                    get(|| async { ([("content-type", "text/javascript")], STUB) }),
                )
                .route(
                    "/siteverify",
                    post(|body: String| async move {
                        let yes = body.split('&').any(|kv| kv == "response=yes");
                        axum::Json(serde_json::json!({"success": yes, "hostname": "shop.example"}))
                    }),
                );
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
    });
    (addr, stop)
}

/// A siteverify room: the page loads the widget's script from the origin
/// its CSP names, shows the widget when the join answers
/// `challenge_required`, and joins with the widget's token.
#[tokio::test]
async fn a_shopper_passes_the_widget_and_joins() {
    let (vendor, _stop) = widget_vendor();
    let gw = Gateway::start(GatewayOptions {
        rest: format!(
            "[[rooms]]\nname = \"drop\"\nprotect = [\"/checkout\"]\nrelease_per_second = 20\nmax_active = 1\nqueue_capacity = 5\npoll_min_s = 1\npoll_max_s = 5\n[rooms.challenge]\nkind = \"siteverify\"\nwidget = \"turnstile\"\nverify_url = \"http://{vendor}/siteverify\"\nscript_url = \"http://{vendor}/stub.js\"\nsecret_env = \"TEST_WIDGET_SECRET\"\nsite_key = \"site-key-1\"\nhostnames = [\"shop.example\"]\n"
        ),
        env: vec![("TEST_WIDGET_SECRET".into(), "widget-secret-0123456789".into())],
        ..Default::default()
    });
    let page = client().get(gw.url("/queue/drop")).send().await.unwrap();
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains(&format!("script-src 'unsafe-inline' http://{vendor};")),
        "{csp}"
    );
    let Some(browser) = Browser::start("en-US").await else {
        return;
    };
    browser.client.goto(&gw.url("/queue/drop")).await.unwrap();
    // Nobody holds the slot: admitted at once after the widget.
    browser
        .wait_state("admitted", Duration::from_secs(20))
        .await;
    let widget = browser.client.find(Locator::Id("widget")).await.unwrap();
    assert_eq!(
        widget.attr("data-rendered").await.unwrap().as_deref(),
        Some("1")
    );
    assert_eq!(
        widget.attr("data-sitekey").await.unwrap().as_deref(),
        Some("site-key-1")
    );
    browser.close().await;
}
