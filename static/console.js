// The console's few behaviours beyond htmx: the copy button of a key shown
// once, the navigation's toggle on a phone, and keeping what a form held
// when the session ended under it. No framework, no build.
document.addEventListener("click", function (e) {
  var b = e.target.closest("[data-copy]");
  if (b) {
    var el = document.getElementById(b.dataset.copy);
    var done = function () {
      b.textContent = b.dataset.done;
      b.classList.add("copied");
    };
    var select = function () {
      var r = document.createRange();
      r.selectNodeContents(el);
      var s = window.getSelection();
      s.removeAllRanges();
      s.addRange(r);
      try { document.execCommand("copy"); } catch (_) { /* selected: the user copies */ }
      done();
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(el.textContent).then(done, select);
    } else {
      select();
    }
    return;
  }
  var t = e.target.closest("#nav-toggle");
  if (t) {
    var open = document.body.classList.toggle("nav-open");
    t.setAttribute("aria-expanded", open ? "true" : "false");
  }
});

// An htmx action after the session ended: the server answers HX-Redirect
// to the login page (with the way back), and htmx is about to load it.
// What the page's forms hold is kept in this tab's sessionStorage (never a
// password, a CSRF token or a hidden field) and put back when the sign-in
// returns to this page; nothing is sent again by itself.
var KEPT = "tg-kept:";
document.addEventListener("htmx:beforeOnLoad", function (e) {
  var x = e.detail.xhr;
  var to = x && x.getResponseHeader("HX-Redirect");
  if (!to || to.indexOf("/console/login") !== 0) return;
  var kept = {};
  document.querySelectorAll("main form[id], main [id] > form").forEach(function (f) {
    var key = f.id || ("in:" + f.parentElement.id);
    var fields = {};
    f.querySelectorAll("input[name], textarea[name], select[name]").forEach(function (el) {
      if (el.type === "hidden" || el.type === "password" || el.type === "submit") return;
      if (el.type === "checkbox" || el.type === "radio") {
        fields[el.name + "=" + el.value] = el.checked;
      } else if (el.value) {
        fields[el.name] = el.value;
      }
    });
    kept[key] = fields;
  });
  try {
    sessionStorage.setItem(KEPT + location.pathname + location.search, JSON.stringify(kept));
  } catch (_) { /* storage full or off: nothing kept */ }
});
document.addEventListener("DOMContentLoaded", function () {
  var slot = KEPT + location.pathname + location.search, kept;
  try {
    kept = JSON.parse(sessionStorage.getItem(slot) || "null");
    sessionStorage.removeItem(slot);
  } catch (_) { return; }
  if (!kept) return;
  Object.keys(kept).forEach(function (key) {
    var f = key.indexOf("in:") === 0
      ? document.querySelector("#" + CSS.escape(key.slice(3)) + " > form")
      : document.getElementById(key);
    if (!f) return;
    var fields = kept[key];
    f.querySelectorAll("input[name], textarea[name], select[name]").forEach(function (el) {
      if (el.type === "hidden" || el.type === "password") return;
      if (el.type === "checkbox" || el.type === "radio") {
        var k = el.name + "=" + el.value;
        if (k in fields) el.checked = fields[k];
      } else if (el.name in fields) {
        el.value = fields[el.name];
      }
    });
    f.classList.add("restored");
  });
});

// A plain form came back refused further down a long page: the page opens
// at its errors, not at its top.
document.addEventListener("DOMContentLoaded", function () {
  var r = document.querySelector("[data-scroll-here]");
  if (r) r.scrollIntoView({ block: "start" });
});

// The quota request form: the app picker offers the chosen tenant's apps
// only (the server checks the pair anyway).
function pickApps(form) {
  var t = form.querySelector("#request-tenant");
  var a = form.querySelector("#request-app");
  if (!t || !a) { return; }
  a.querySelectorAll("optgroup[data-tenant]").forEach(function (g) {
    var other = t.value !== "" && g.dataset.tenant !== t.value;
    g.hidden = other;
    g.disabled = other;
  });
  var chosen = a.selectedOptions[0];
  if (chosen && chosen.parentElement.disabled) { a.value = ""; }
}
document.addEventListener("change", function (e) {
  if (e.target.id === "request-tenant") { pickApps(e.target.form); }
});
document.addEventListener("htmx:load", function (e) {
  var f = e.detail.elt.querySelector && e.detail.elt.querySelector("#request-tenant");
  if (f) { pickApps(f.form); }
});
document.addEventListener("DOMContentLoaded", function () {
  var f = document.getElementById("request-tenant");
  if (f) { pickApps(f.form); }
});
