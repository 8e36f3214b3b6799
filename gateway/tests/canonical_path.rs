//! One canonical path, through the real binary: a protected origin path in
//! every spelling, against an origin that records each request-target it
//! receives. No spelling reaches the origin without a pass; with a pass the
//! origin receives exactly the canonical path. Also: two `Authorization`
//! headers are refused.

mod common;

use common::{
    admitted_pass, client, raw_request, raw_status, Gateway, GatewayOptions, RecordingOrigin,
};

/// What a spelling of a path under `/cart/` gets.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// `400 bad_request`, with or without a pass; never proxied.
    Refused,
    /// Protected: `401` without a pass; with one, the origin is sent this.
    Protected(&'static str),
    /// Not a protected path: proxied as this, pass or not.
    Open(&'static str),
}

use Expect::*;

/// The spellings, and what each gets when the room does not fold case.
const SPELLINGS: &[(&str, Expect)] = &[
    ("/cart/x", Protected("/cart/x")),
    ("/%63art/x", Protected("/cart/x")),
    ("/%63%61%72%74/%78", Protected("/cart/x")),
    ("/c%61rt/x", Protected("/cart/x")),
    ("/cart/%7eitem", Protected("/cart/~item")),
    ("/cart/caf%c3%a9", Protected("/cart/caf%C3%A9")),
    ("/cart/a%2cb", Protected("/cart/a%2Cb")),
    ("/cart/a|b", Protected("/cart/a%7Cb")),
    ("/cart/", Protected("/cart/")),
    (
        "/cart/x?q=%2f..;&r=%63",
        Protected("/cart/x?q=%2f..;&r=%63"),
    ),
    ("http://shop/%63art/x", Protected("/cart/x")),
    ("/Cart/x", Open("/Cart/x")),
    ("/CART/x", Open("/CART/x")),
    ("/%43art/x", Open("/Cart/x")),
    ("/cart;x/y", Refused),
    ("/..;/..;/secret.txt", Refused),
    ("/cart/..;/x", Refused),
    ("/cart;jsessionid=1/x", Refused),
    ("/cart%3bx/y", Refused),
    ("/cart%3B/x", Refused),
    ("/%2e%2e/cart/x", Refused),
    ("/%2E%2E/cart/x", Refused),
    ("/.%2e/cart/x", Refused),
    ("/x/../cart/x", Refused),
    ("/x/%2e%2e/cart/x", Refused),
    ("/./cart/x", Refused),
    ("/cart/./x", Refused),
    ("/cart/x/..", Refused),
    ("/cart%2fx", Refused),
    ("/cart%2Fx", Refused),
    ("/x%2f..%2fcart/x", Refused),
    ("/cart%5cx", Refused),
    ("/x\\..\\cart/x", Refused),
    ("/cart%00/x", Refused),
    ("/cart/x%00.png", Refused),
    ("/cart/%0d%0aSet-Cookie:a=b", Refused),
    ("/%c0%ae%c0%ae/cart/x", Refused),
    ("/cart%c0%afx", Refused),
    ("/%252e%252e/cart/x", Refused),
    ("/%2563art/x", Refused),
    ("//cart/x", Refused),
    ("/cart//x", Refused),
    ("/cart/%zz", Refused),
    ("/cart/%4", Refused),
    ("/cart%ef%bc%8fx", Refused),
    ("/cart/x%ff", Refused),
    ("/C:/cart/x", Refused),
    // What a normalising origin (NFKC) reads as `/cart` or `..`.
    ("/%F0%9D%90%9Cart/x", Refused),
    ("/%E2%93%92art/x", Refused),
    ("/x/%E2%80%A5/cart/x", Refused),
    ("/cart/cafe%CC%81", Refused),
    // Long paths: 255 bytes (the protect check writes the slashed spelling
    // on the stack) and 256 (on the heap).
    (LONG_255, Protected(LONG_255)),
    (LONG_256, Protected(LONG_256)),
];

const LONG_255: &str = "/cart/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const LONG_256: &str = "/cart/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/// What a spelling gets in a room with `protect_case_insensitive = true`.
fn folded(expect: Expect) -> Expect {
    match expect {
        Open(target) => Protected(target),
        other => other,
    }
}

fn get(gw: &Gateway, target: &str, extra_headers: &str) -> String {
    raw_request(
        gw.listen,
        &format!("GET {target} HTTP/1.1\r\nHost: shop\r\n{extra_headers}Connection: close\r\n\r\n"),
    )
}

fn start(origin: &RecordingOrigin, fold_case: bool) -> Gateway {
    Gateway::start(GatewayOptions {
        origin: Some(origin.url()),
        rest: format!(
            "[[rooms]]\nname = \"drop\"\nprotect = [\"/cart/**\"]\nprotect_case_insensitive = {fold_case}\nrelease_per_second = 10\nmax_active = 10\nqueue_capacity = 100\n"
        ),
        ..Default::default()
    })
}

async fn every_spelling(fold_case: bool) {
    assert!(SPELLINGS.len() >= 30);
    let origin = RecordingOrigin::start();
    let gw = start(&origin, fold_case);
    let expect = |e: Expect| if fold_case { folded(e) } else { e };

    // Without a pass: refused, or sent to the queue, or (only when not
    // protected) proxied in canonical form.
    let mut proxied = Vec::new();
    for (spelling, e) in SPELLINGS {
        let response = get(&gw, spelling, "");
        let status = raw_status(&response);
        match expect(*e) {
            Refused => {
                assert_eq!(status, 400, "{spelling}: {response}");
                assert!(
                    response.contains("\"error\":\"bad_request\""),
                    "{spelling}: {response}"
                );
            }
            Protected(_) => {
                assert_eq!(status, 401, "{spelling}: {response}");
                assert!(
                    response.contains("\"error\":\"invalid_pass\""),
                    "{spelling}"
                );
            }
            Open(target) => {
                assert_eq!(status, 200, "{spelling}: {response}");
                assert!(
                    response.ends_with(&format!("origin saw {target}")),
                    "{spelling}: {response}"
                );
                proxied.push(target.to_string());
            }
        }
    }
    assert_eq!(
        origin.targets(),
        proxied,
        "without a pass the origin saw only unprotected paths, in canonical form"
    );

    // With a pass: protected spellings reach the origin, as the canonical
    // path and nothing else; refused ones stay refused.
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let cookie = format!("Cookie: sluice_pass={pass}\r\n");
    for (spelling, e) in SPELLINGS {
        let before = origin.targets().len();
        let response = get(&gw, spelling, &cookie);
        let status = raw_status(&response);
        match expect(*e) {
            Refused => {
                assert_eq!(status, 400, "{spelling} with a pass: {response}");
                assert_eq!(origin.targets().len(), before, "{spelling} was proxied");
            }
            Protected(target) | Open(target) => {
                assert_eq!(status, 200, "{spelling} with a pass: {response}");
                let targets = origin.targets();
                assert_eq!(targets.len(), before + 1, "{spelling}");
                assert_eq!(targets[before], target, "{spelling} reached the origin as");
            }
        }
    }
}

#[tokio::test]
async fn no_spelling_reaches_a_protected_origin_path_without_a_pass() {
    every_spelling(false).await;
}

#[tokio::test]
async fn a_case_folding_room_protects_every_case() {
    every_spelling(true).await;
}

#[tokio::test]
async fn two_authorization_headers_are_refused_everywhere() {
    let origin = RecordingOrigin::start();
    let gw = start(&origin, false);
    let pass = admitted_pass(&gw.url(""), &client(), "drop").await;
    let one = format!("Authorization: Bearer {pass}\r\n");
    let response = get(&gw, "/cart/x", &one);
    assert_eq!(
        raw_status(&response),
        200,
        "one header with the pass: {response}"
    );
    assert_eq!(origin.targets(), ["/cart/x"]);
    for target in [
        "/cart/x",
        "/open/x",
        "/queue/drop/status",
        "/catalog/products.json",
    ] {
        for second in [
            "Bearer junk".to_string(),
            format!("Bearer {pass}"),
            "Basic dTpw".into(),
        ] {
            let two = format!("{one}Authorization: {second}\r\n");
            let response = get(&gw, target, &two);
            assert_eq!(
                raw_status(&response),
                400,
                "{target} + {second}: {response}"
            );
            assert!(
                response.contains("\"error\":\"bad_request\"")
                    && response.contains("more than one Authorization header"),
                "{target}: {response}"
            );
        }
    }
    assert_eq!(origin.targets(), ["/cart/x"], "nothing else was proxied");
}

#[tokio::test]
async fn a_pass_cookie_tossed_in_beside_the_shoppers_own_is_refused() {
    // A sibling subdomain can set `sluice_pass` with `Domain=` and a longer
    // path, which the browser sends first: read first-wins, it would put
    // the shopper's checkout under the attacker's pass.
    let origin = RecordingOrigin::start();
    let gw = start(&origin, false);
    let mine = admitted_pass(&gw.url(""), &client(), "drop").await;
    let theirs = admitted_pass(&gw.url(""), &client(), "drop").await;
    let same = format!("Cookie: sluice_pass={mine}; sluice_pass={mine}\r\n");
    let response = get(&gw, "/cart/x", &same);
    assert_eq!(
        raw_status(&response),
        200,
        "the same pass twice: {response}"
    );
    for cookies in [
        format!("Cookie: sluice_pass={theirs}; sluice_pass={mine}\r\n"),
        format!("Cookie: sluice_pass={theirs}\r\nCookie: sluice_pass={mine}\r\n"),
        "Cookie: sluice_ticket=a; theme=dark; sluice_ticket=b\r\n".to_string(),
    ] {
        for target in ["/cart/x", "/queue/drop/status", "/open/x"] {
            let response = get(&gw, target, &cookies);
            assert_eq!(
                raw_status(&response),
                400,
                "{target} {cookies:?}: {response}"
            );
            assert!(
                response.contains("\"error\":\"bad_request\"")
                    && response.contains("two different"),
                "{response}"
            );
        }
    }
    assert_eq!(origin.targets(), ["/cart/x"], "nothing else was proxied");
}

#[tokio::test]
async fn a_request_must_name_one_site() {
    let origin = RecordingOrigin::start();
    let gw = start(&origin, false);
    let send = |head: &str| raw_request(gw.listen, head);
    let ok = send("GET /open/x HTTP/1.1\r\nHost: shop\r\nConnection: close\r\n\r\n");
    assert_eq!(raw_status(&ok), 200, "{ok}");
    // HTTP/1.0 may leave Host out.
    let old = send("GET /open/old HTTP/1.0\r\n\r\n");
    assert_eq!(raw_status(&old), 200, "{old}");
    assert_eq!(origin.targets(), ["/open/x", "/open/old"]);

    for head in [
        "GET /open/y HTTP/1.1\r\nConnection: close\r\n\r\n",
        "GET /catalog/products.json HTTP/1.1\r\nConnection: close\r\n\r\n",
    ] {
        let response = send(head);
        assert_eq!(raw_status(&response), 400, "{head:?}: {response}");
        assert!(
            response.contains("\"error\":\"bad_request\"")
                && response.contains("must carry a Host header"),
            "{head:?}: {response}"
        );
    }
    // Two Host headers: pingora's own parser answers 400 before any phase
    // runs (so the body is pingora's, not the contract's); the gateway's
    // check stands behind it for HTTP/2.
    for head in [
        "GET /open/y HTTP/1.1\r\nHost: shop\r\nHost: evil\r\nConnection: close\r\n\r\n",
        "GET /open/y HTTP/1.0\r\nHost: shop\r\nHost: evil\r\n\r\n",
    ] {
        let response = send(head);
        assert_eq!(raw_status(&response), 400, "{head:?}: {response}");
    }
    assert_eq!(
        origin.targets(),
        ["/open/x", "/open/old"],
        "nothing else was proxied"
    );
}
