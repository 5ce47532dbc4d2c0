// fusec report: switch views and chains; show an op's or a kernel's detail on hover or click.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("fusec-data").textContent);
  const body = document.body;
  const detail = document.getElementById("detail");
  let pinned = null;

  function esc(s) {
    return String(s == null ? "" : s).replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  }

  function show(view, scope) {
    if (view) body.dataset.view = view;
    if (scope != null) body.dataset.scope = scope;
    const v = body.dataset.view, s = body.dataset.scope;
    document.querySelectorAll("nav.views button").forEach((b) => b.classList.toggle("on", b.dataset.view === v));
    document.querySelectorAll("nav.scopes button").forEach((b) => b.classList.toggle("on", b.dataset.scope === s));
    document.querySelectorAll("section.view").forEach((el) => { el.hidden = el.dataset.view !== v; });
    document.querySelectorAll(".scope").forEach((el) => {
      el.hidden = !(el.dataset.scope === s || (s === "all" && el.hasAttribute("data-all")));
    });
    history.replaceState(null, "", "#" + v + "/" + s);
  }

  function row(k, v) { return v === "" || v == null ? "" : "<tr><th>" + esc(k) + "</th><td>" + v + "</td></tr>"; }

  function decisionList(chain, ids) {
    return "<ul class='decisions'>" + ids.map((i) => {
      const d = chain.decisions[i];
      const cls = d.verdict.startsWith("not ") ? "rejected" : d.verdict === "note" ? "note" : "accepted";
      return "<li class='" + cls + "'>" + esc(d.text) + "</li>";
    }).join("") + "</ul>";
  }

  function kernelRows(k) {
    if (!k) return "";
    return row("kernel", "<a href='#' data-card='" + k.id + "'>kernel " + k.id + "</a> · " + esc(k.template)) +
      row("tiles", esc(k.tiles)) + row("model", esc(k.cost));
  }

  function opDetail(ci, key) {
    const chain = data.chains[ci], n = chain.nodes[key];
    const k = n.kernel == null ? null : chain.kernels[String(n.kernel)];
    let h = "<h3>" + esc(n.title) + "</h3>";
    if (n.fdsl) h += "<p>" + esc(n.fdsl) + (n.loc ? " <span class='note'>(" + esc(n.loc) + ")</span>" : "") + "</p>";
    if (n.source) h += "<pre>" + esc(n.source) + "</pre>";
    h += "<table>" + row("chain", esc(chain.name)) + row("type", esc(n.type)) + row("bytes", esc(n.bytes)) +
      row("IR op", esc(n.ir)) + row("role", esc(n.role)) + kernelRows(k) +
      row("recomputed in", (n.recomputed_in || []).map((x) => "kernel " + x).join(", ")) + row("note", esc(n.note)) +
      "</table>";
    if (n.kind === "arg" || n.kind === "out") return h;
    if (n.kind === "view") h += "<p class='note'>a view: no kernel computes it; it renames its input's memory</p>";
    const mine = n.decisions || [];
    h += "<h4>decisions about %" + n.op + "</h4>" + (mine.length ? decisionList(chain, mine) : "<p class='note'>none</p>");
    if (k) {
      const other = k.decisions.filter((i) => mine.indexOf(i) < 0);
      if (other.length) h += "<h4>decisions that name kernel " + k.id + "</h4>" + decisionList(chain, other);
    }
    return h;
  }

  function kernelDetail(ci, id) {
    const chain = data.chains[ci], k = chain.kernels[String(id)];
    let h = "<h3>kernel " + k.id + " of " + esc(chain.name) + "</h3><table>" + kernelRows(k) +
      row("ops", k.ops.map((o) => esc((chain.nodes["op" + o] || {title: "%" + o}).title)).join("<br>")) +
      row("recomputed here", k.recomputed.map((o) => "%" + o).join(", ")) + "</table>";
    if (k.decisions.length) h += "<h4>decisions that name it</h4>" + decisionList(chain, k.decisions);
    return h;
  }

  function parse(el) {
    const m = /^c(\d+)-(.+)$/.exec(el.id || "");
    return m ? [Number(m[1]), m[2]] : null;
  }

  function select(el, html) {
    document.querySelectorAll(".sel, .hl").forEach((x) => x.classList.remove("sel", "hl"));
    if (el) el.classList.add(el.classList.contains("cluster") ? "hl" : "sel");
    detail.innerHTML = html;
  }

  function nodeHtml(el) {
    const at = parse(el);
    if (!at) return null;
    if (el.classList.contains("cluster")) return kernelDetail(at[0], Number(at[1].slice(1)));
    return opDetail(at[0], at[1]);
  }

  document.querySelectorAll("svg.graph g.node, svg.graph g.cluster").forEach((el) => {
    el.addEventListener("click", (ev) => {
      ev.stopPropagation();
      pinned = pinned === el ? null : el;
      select(el, nodeHtml(el));
      if (pinned && !el.classList.contains("cluster")) {
        const at = parse(el), n = data.chains[at[0]].nodes[at[1]];
        if (n.kernel != null) {
          const c = document.getElementById("c" + at[0] + "-k" + n.kernel);
          if (c) c.classList.add("hl");
        }
      }
    });
    el.addEventListener("mouseenter", () => { if (!pinned) detail.innerHTML = nodeHtml(el); });
  });

  detail.addEventListener("click", (ev) => {
    const a = ev.target.closest("a[data-card]");
    if (!a) return;
    ev.preventDefault();
    const ci = pinned ? parse(pinned)[0] : 0;
    show("kernels", String(ci));
    const card = document.getElementById("c" + ci + "-card-k" + a.dataset.card);
    if (card) card.scrollIntoView();
  });

  // zoom every graph alike: its width and height scaled, in its own units (dot's pt, or px)
  const sized = Array.from(document.querySelectorAll("svg.graph")).map((svg) => [svg, svg.getAttribute("width"),
    svg.getAttribute("height")]);
  let zoom = 1;
  function setZoom(z) {
    zoom = Math.min(4, Math.max(0.2, z));
    sized.forEach(([svg, w, h]) => {
      svg.setAttribute("width", parseFloat(w) * zoom + w.replace(/[\d.]/g, ""));
      svg.setAttribute("height", parseFloat(h) * zoom + h.replace(/[\d.]/g, ""));
    });
    document.querySelectorAll(".zoomv").forEach((el) => { el.textContent = Math.round(zoom * 100) + "%"; });
  }
  document.querySelectorAll("button[data-zoom]").forEach((b) => b.addEventListener("click", () => {
    setZoom(b.dataset.zoom === "in" ? zoom * 1.25 : b.dataset.zoom === "out" ? zoom / 1.25 : 1);
  }));

  document.querySelectorAll("nav.views button").forEach((b) => b.addEventListener("click", () => show(b.dataset.view)));
  document.querySelectorAll("nav.scopes button").forEach((b) => b.addEventListener("click", () => show(null, b.dataset.scope)));

  const m = /^#(\w+)\/(\w+)$/.exec(location.hash);
  const views = Array.from(document.querySelectorAll("nav.views button")).map((b) => b.dataset.view);
  const scopes = Array.from(document.querySelectorAll("nav.scopes button")).map((b) => b.dataset.scope);
  show(m && views.indexOf(m[1]) >= 0 ? m[1] : "graph", m && scopes.indexOf(m[2]) >= 0 ? m[2] : "all");
})();
