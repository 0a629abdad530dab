// camit run report: small enhancements only; the page is complete without JavaScript.
(function () {
  "use strict";
  var body = document.body;
  var buttons = document.querySelectorAll(".filters button");
  function show(mode) {
    body.classList.toggle("only-problems", mode === "problems");
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].classList.toggle("on", buttons[i].getAttribute("data-mode") === mode);
    }
  }
  for (var i = 0; i < buttons.length; i++) {
    buttons[i].addEventListener("click", function (ev) { show(ev.currentTarget.getAttribute("data-mode")); });
  }
  // following a link to a problem or a core opens its <details>
  function openTarget() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    if (el && el.tagName === "DETAILS") { el.open = true; }
  }
  window.addEventListener("hashchange", openTarget);
  openTarget();
  // times are written in UTC; show the reader's local time on hover
  var stamps = document.querySelectorAll("[data-epoch]");
  for (var j = 0; j < stamps.length; j++) {
    var t = new Date(parseFloat(stamps[j].getAttribute("data-epoch")) * 1000);
    stamps[j].title = t.toString();
  }
  body.setAttribute("data-js", "ready");
})();
