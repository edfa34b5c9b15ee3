// The console's few behaviours beyond htmx: the copy button of a key shown
// once, and the navigation's toggle on a phone. No framework, no build.
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
