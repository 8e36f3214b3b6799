/* Sluice Store checkout: shared by /checkout.html and /pt/checkout.html.
   Plain JS, no dependencies. Talks to the gateway's /checkout and /orders routes. */
(function () {
  "use strict";
  var PT = /^pt/i.test(document.documentElement.lang);
  var L = PT ? "pt-BR" : "en";
  var TEXT = {
    en: {
      idle: "Choose a quantity and a payment method, then press Pay.",
      submitting: "Placing your order…",
      processing: "Still processing your request…",
      retrying: "Connection problem. Retrying… (attempt {n} of {max})",
      reserved: "Reserved for you. Processing your payment…",
      authorizing: "Authorizing your card…",
      confirmed: "Paid! Your order is confirmed.",
      declined: "Your card was declined. Nothing was charged and the item went back to stock.",
      cancelled: "Order cancelled. The item went back to stock.",
      expired: "Your reservation expired before the payment went through. The item went back to stock.",
      refunding: "Refunding your payment…",
      refunded: "Refunded. Your order is cancelled and the payment was returned.",
      voided: "Payment voided. Nothing was charged.",
      rejected: "Out of stock: there are not enough units left for this order.",
      sold_out: "Sold out: this drop has no stock left.",
      needs_pass: "You need to go through the waiting room first.",
      join: "Go to the waiting room",
      unknown_sku: "This product is not in the catalog.",
      gave_up: "We could not reach the store. Press Pay to try again: it is the same request, you will not be charged twice.",
      error: "Something went wrong. Please try again.",
      cancel_failed: "The order could not be cancelled: {m}",
      price_unknown: "—"
    },
    pt: {
      idle: "Escolha a quantidade e a forma de pagamento e toque em Pagar.",
      submitting: "Enviando seu pedido…",
      processing: "Ainda processando seu pedido…",
      retrying: "Problema de conexão. Tentando de novo… (tentativa {n} de {max})",
      reserved: "Reservado para você. Processando seu pagamento…",
      authorizing: "Autorizando seu cartão…",
      confirmed: "Pago! Seu pedido está confirmado.",
      declined: "Seu cartão foi recusado. Nada foi cobrado e o item voltou ao estoque.",
      cancelled: "Pedido cancelado. O item voltou ao estoque.",
      expired: "Sua reserva expirou antes de o pagamento ser concluído. O item voltou ao estoque.",
      refunding: "Estornando seu pagamento…",
      refunded: "Estornado. Seu pedido foi cancelado e o pagamento devolvido.",
      voided: "Pagamento anulado. Nada foi cobrado.",
      rejected: "Esgotado: não há unidades suficientes para este pedido.",
      sold_out: "Esgotado: este drop não tem mais estoque.",
      needs_pass: "Você precisa passar pela fila de espera primeiro.",
      join: "Ir para a fila de espera",
      unknown_sku: "Este produto não está no catálogo.",
      gave_up: "Não conseguimos falar com a loja. Toque em Pagar para tentar de novo: é o mesmo pedido, você não será cobrado duas vezes.",
      error: "Algo deu errado. Tente de novo.",
      cancel_failed: "Não foi possível cancelar o pedido: {m}",
      price_unknown: "—"
    }
  }[PT ? "pt" : "en"];
  var FINAL = ["confirmed", "declined", "cancelled", "expired", "refunded", "voided", "rejected"];
  var CANCELLABLE = ["reserved", "confirmed"];
  var MAX_TRIES = 5, MAX_BUSY = 30, POLL_MS = 2000, TIMEOUT_MS = 15000;

  function $(id) { return document.getElementById(id); }
  function t(k, v) { return (TEXT[k] || k).replace(/\{(\w+)\}/g, function (_, n) { return v && v[n] != null ? v[n] : ""; }); }
  var store = {
    get: function (k) { try { return sessionStorage.getItem(k); } catch (e) { return null; } },
    set: function (k, v) { try { sessionStorage.setItem(k, v); } catch (e) {} },
    del: function (k) { try { sessionStorage.removeItem(k); } catch (e) {} }
  };
  function money(c) {
    var s = (c / 100).toFixed(2).split(".");
    return "R$ " + s[0].replace(/\B(?=(\d{3})+$)/g, ".") + "," + s[1];
  }
  function newKey() {
    if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
    var b = new Uint8Array(16);
    crypto.getRandomValues(b);
    return Array.prototype.map.call(b, function (x) { return (x + 256).toString(16).slice(1); }).join("");
  }

  var params = new URLSearchParams(location.search);
  var sku = params.get("sku") || "sneaker-42";
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(sku)) sku = "sneaker-42";
  var form = $("checkout-form"), qtyEl = $("quantity"), pmEl = $("payment-method"), payBtn = $("pay");
  var stateEl = $("order-state"), helpEl = $("order-help"), details = $("order-details");
  var cancelBtn = $("cancel-order"), againBtn = $("start-over");
  var priceCents = null, order = null, pollTimer = null, busy = false;
  var CUR = "sluice_checkout:current:" + sku;

  $("product-sku").textContent = $("product-name").textContent = sku;
  var langLink = document.querySelector(".site-nav a.lang");
  if (langLink) langLink.href = langLink.getAttribute("href") + "?sku=" + encodeURIComponent(sku);

  /* ---------- state display ---------- */
  function show(state, msg, link) {
    if (stateEl.getAttribute("data-state") !== state || stateEl.textContent !== msg) {
      stateEl.setAttribute("data-state", state);
      stateEl.textContent = msg;
    }
    helpEl.textContent = "";
    helpEl.hidden = !link;
    if (link) {
      var a = document.createElement("a");
      a.href = link; a.id = "join-link"; a.className = "btn btn-small"; a.textContent = t("join");
      helpEl.appendChild(a);
    }
  }
  function lockForm(locked) {
    qtyEl.disabled = pmEl.disabled = payBtn.disabled = locked;
    payBtn.setAttribute("aria-disabled", String(locked));
  }
  function fmtTime(v) {
    if (v == null || v === "") return "—";
    var d = typeof v === "number" ? new Date(v < 1e12 ? v * 1000 : v) : new Date(v);
    if (isNaN(d.getTime())) return String(v);
    return d.toLocaleTimeString(L, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  }
  function renderOrder(o) {
    order = o;
    var st = String(o.state || "");
    details.hidden = false;
    $("order-id").textContent = o.order_id || "—";
    $("order-state-value").textContent = st;
    $("payment-state").textContent = (o.payment && o.payment.state) || "—";
    var exp = $("reservation-expires");
    exp.textContent = fmtTime(o.reservation_expires_at);
    if (o.reservation_expires_at != null) exp.setAttribute("datetime", String(o.reservation_expires_at));
    show(st, TEXT[st] ? t(st) : st);
    cancelBtn.hidden = CANCELLABLE.indexOf(st) < 0;
    cancelBtn.disabled = false;
    var done = FINAL.indexOf(st) >= 0;
    againBtn.hidden = !done;
    lockForm(true);
    var cur = readCur() || {};
    cur.order = o; cur.order_id = o.order_id; cur.done = done;
    if (done && cur.k) { store.del(cur.k); delete cur.k; }
    store.set(CUR, JSON.stringify(cur));
    clearTimeout(pollTimer);
    if (!done && o.order_id) pollTimer = setTimeout(poll, POLL_MS);
  }
  function readCur() { try { return JSON.parse(store.get(CUR) || "null"); } catch (e) { return null; } }

  /* ---------- HTTP ---------- */
  function headers(extra) {
    var h = { "Accept": "application/json" };
    var pass = store.get("sluice_pass:drop");
    if (pass) h["Authorization"] = "Bearer " + pass;
    for (var k in extra) h[k] = extra[k];
    return h;
  }
  function request(method, path, body, extra) {
    var ctl = window.AbortController ? new AbortController() : null;
    var timer = ctl && setTimeout(function () { ctl.abort(); }, TIMEOUT_MS);
    var init = { method: method, headers: headers(extra), credentials: "same-origin", cache: "no-store" };
    if (ctl) init.signal = ctl.signal;
    if (body !== undefined) { init.body = JSON.stringify(body); init.headers["Content-Type"] = "application/json"; }
    return fetch(path, init).then(function (r) {
      clearTimeout(timer);
      return r.text().then(function (s) {
        var j = null; try { j = s ? JSON.parse(s) : null; } catch (e) {}
        return { status: r.status, json: j || {}, retryAfter: parseInt(r.headers.get("Retry-After"), 10) };
      });
    }, function (e) { clearTimeout(timer); throw e; });
  }
  function needsPass(j) {
    var m = /^\/queue\/([^/?#]+)\/join$/.exec((j && j.join) || "");
    var room = m ? m[1] : "drop";
    show("needs_pass", t("needs_pass"), "/queue/" + room + "?next=" + encodeURIComponent(location.pathname + location.search));
  }
  function backoff(n, ra) {
    var s = Math.min(Math.pow(2, n - 1), 4);
    if (ra > 0) s = Math.max(s, Math.min(ra, 30));
    return s * 1000;
  }

  /* ---------- checkout ---------- */
  function attempt() {
    var qty = parseInt(qtyEl.value, 10), pm = pmEl.value;
    var k = "sluice_checkout:key:" + sku + "|" + qty + "|" + pm;
    var key = store.get(k);
    if (!key) { key = newKey(); store.set(k, key); }
    store.set(CUR, JSON.stringify({ qty: qty, pm: pm, k: k }));
    return { body: { sku: sku, quantity: qty, payment_method: pm }, key: key, k: k };
  }
  function submit(a, tries, busyCount) {
    busy = true;
    lockForm(true);
    if (tries === 1 && !busyCount) show("submitting", t("submitting"));
    function retry(ra) {
      if (tries >= MAX_TRIES) { busy = false; lockForm(false); return show("error", t("gave_up")); }
      show("retrying", t("retrying", { n: tries + 1, max: MAX_TRIES }));
      setTimeout(function () { submit(a, tries + 1, busyCount); }, backoff(tries, ra));
    }
    request("POST", "/checkout", a.body, { "Idempotency-Key": a.key }).then(function (r) {
      var j = r.json, code = j.error;
      if (r.status === 200 || r.status === 201) { busy = false; return renderOrder(j); }
      if (r.status === 409 || code === "idempotency_conflict") {
        if ((busyCount || 0) >= MAX_BUSY) return retry(r.retryAfter);
        show("processing", t("processing"));
        return setTimeout(function () { submit(a, tries, (busyCount || 0) + 1); }, 1000);
      }
      if (r.status >= 500 || r.status === 429) return retry(r.retryAfter);
      busy = false;
      if (r.status === 401) { store.del(CUR); lockForm(false); return needsPass(j); }
      // Final answers: this key is spent, the next attempt gets a fresh one.
      store.del(a.k); store.del(CUR);
      lockForm(false);
      if (r.status === 410 || code === "sold_out") return show("sold_out", t("sold_out"));
      show("error", j.message || t("error"));
      stateEl.setAttribute("data-error", code || String(r.status));
    }, function () { retry(0); });
  }
  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    if (busy || payBtn.disabled) return;
    stateEl.removeAttribute("data-error");
    submit(attempt(), 1, 0);
  });

  /* ---------- polling and cancel ---------- */
  var pollFails = 0;
  function poll() {
    if (!order || !order.order_id) return;
    request("GET", "/orders/" + encodeURIComponent(order.order_id)).then(function (r) {
      if (r.status === 200 && r.json.state) { pollFails = 0; return renderOrder(r.json); }
      if (r.status === 401) return needsPass(r.json);
      if (r.status >= 500 || r.status === 429) return again();
      show("error", r.json.message || t("error"));
    }, again);
    function again() { pollFails++; pollTimer = setTimeout(poll, Math.min(POLL_MS * pollFails, 10000)); }
  }
  cancelBtn.addEventListener("click", function () {
    if (!order || !order.order_id) return;
    cancelBtn.disabled = true;
    clearTimeout(pollTimer);
    var id = order.order_id;
    (function go(tries) {
      request("POST", "/orders/" + encodeURIComponent(id) + "/cancel", {}).then(function (r) {
        if ((r.status === 200 || r.status === 202) && r.json.state) return renderOrder(r.json);
        if (r.status >= 500 || r.status === 429 || r.status === 409) {
          if (tries < MAX_TRIES) return setTimeout(function () { go(tries + 1); }, backoff(tries, r.retryAfter));
        }
        if (r.status === 401) return needsPass(r.json);
        if (r.status < 300) return poll();
        cancelBtn.disabled = false;
        show("error", t("cancel_failed", { m: r.json.message || r.status }));
      }, function () {
        if (tries < MAX_TRIES) return setTimeout(function () { go(tries + 1); }, backoff(tries, 0));
        cancelBtn.disabled = false;
        show("error", t("gave_up"));
      });
    })(1);
  });
  againBtn.addEventListener("click", function () {
    clearTimeout(pollTimer);
    var cur = readCur();
    if (cur && cur.k) store.del(cur.k);
    store.del(CUR);
    order = null;
    details.hidden = true;
    $("order-id").textContent = "";
    cancelBtn.hidden = againBtn.hidden = true;
    stateEl.removeAttribute("data-error");
    lockForm(false);
    show("idle", t("idle"));
    qtyEl.focus();
  });

  /* ---------- product and total ---------- */
  function total() {
    $("order-total").textContent = priceCents == null ? t("price_unknown") : money(priceCents * (parseInt(qtyEl.value, 10) || 1));
  }
  qtyEl.addEventListener("change", total);
  fetch("/catalog/products.json", { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (cat) {
    var p = (cat.products || []).filter(function (x) { return x.sku === sku; })[0];
    if (!p) { show("error", t("unknown_sku")); stateEl.setAttribute("data-error", "unknown_sku"); payBtn.disabled = true; return; }
    var name = (p.name && (p.name[PT ? "pt" : "en"] || p.name.en)) || sku;
    $("product-name").textContent = name;
    priceCents = p.price_cents;
    $("product-price").textContent = money(p.price_cents);
    if (p.image) { var img = $("product-image"); img.src = p.image; img.alt = ""; img.hidden = false; }
    var back = $("product-link");
    if (back && p.url) back.href = p.url[PT ? "pt" : "en"] || back.href;
    total();
  }).catch(function () { total(); });

  /* ---------- resume after a reload ---------- */
  var cur = readCur();
  if (cur && cur.qty) {
    qtyEl.value = String(cur.qty);
    if (cur.pm) pmEl.value = cur.pm;
  }
  total();
  if (cur && cur.order) renderOrder(cur.order);          // shows it, polls while not final
  else if (cur && cur.k && store.get(cur.k)) {           // an answer never came: ask again, same key
    submit({ body: { sku: sku, quantity: cur.qty, payment_method: cur.pm }, key: store.get(cur.k), k: cur.k }, 1, 0);
  } else show("idle", t("idle"));
})();
