// camit run report: small enhancements only; the page is complete without JavaScript (a
// Content-Security-Policy such as Jenkins' default blocks this script, and nothing is lost but these).
(function () {
  "use strict";
  var body = document.body;
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
