/* attndesk interactive page: draws the heatmaps of the JSON in #attndesk-data on canvases.
   Colours follow attndesk.render.colormaps: value -> round((v - lo) / (hi - lo) * 255) into the
   256-entry table; masked cells are striped in the mask and hatch colours, as in the window. */
(function () {
  "use strict";
  var doc = JSON.parse(document.getElementById("attndesk-data").textContent);
  var layers = doc.layers || [doc];
  var state = { layer: 0, target: "all", colormap: doc.view.colormap, shared: doc.view.shared_scale,
                log: doc.view.log_scale, big: null, hover: null };
  var cache = {};
  var HALF = null;

  // ---- decoding -------------------------------------------------------------------------------
  function bytesOf(b64) {
    var bin = atob(b64), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function halfTable() {
    if (HALF) return HALF;
    HALF = new Float32Array(65536);
    for (var h = 0; h < 65536; h++) {
      var s = (h & 0x8000) ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
      HALF[h] = e === 0 ? s * f * Math.pow(2, -24) : e === 31 ? (f ? NaN : s * Infinity)
        : s * (1 + f / 1024) * Math.pow(2, e - 15);
    }
    return HALF;
  }
  function decodeWeights(obj) {
    if (Array.isArray(obj)) return Float32Array.from(obj.flat(Infinity));
    var bytes = bytesOf(obj.base64);
    if (obj.dtype === "float32") return new Float32Array(bytes.buffer);
    var raw = new Uint16Array(bytes.buffer), table = halfTable(), out = new Float32Array(raw.length);
    for (var i = 0; i < raw.length; i++) out[i] = table[raw[i]];
    return out;
  }
  function decodeMask(obj, n) {
    if (!obj) return null;
    var bits = bytesOf(obj.bits), out = new Uint8Array(n);
    for (var i = 0; i < n; i++) out[i] = (bits[i >> 3] >> (i & 7)) & 1;
    return out;
  }
  function layerData(index) {
    if (cache[index]) return cache[index];
    var e = layers[index], shape = e.weights.shape || [e.heads.length, e.queries.length, e.keys.length];
    var d = { entry: e, H: shape[0], Lq: shape[1], Lk: shape[2], w: decodeWeights(e.weights), mean: null };
    d.mask = decodeMask(e.mask, d.Lq * d.Lk);
    cache[index] = d;
    return d;
  }
  function meanOf(d) {
    if (d.mean) return d.mean;
    var n = d.Lq * d.Lk, m = new Float64Array(n);
    for (var h = 0; h < d.H; h++) for (var i = 0; i < n; i++) m[i] += d.w[h * n + i];
    d.mean = new Float32Array(n);
    for (var j = 0; j < n; j++) d.mean[j] = m[j] / d.H;
    return d.mean;
  }
  function matrix(d, head) {
    var n = d.Lq * d.Lk;
    return head === "mean" ? meanOf(d) : d.w.subarray(head * n, (head + 1) * n);
  }

  // ---- colour scale (attndesk.render.figure.value_range) ---------------------------------------
  function logFloor(count) { return Math.pow(10, Math.floor(Math.log10(0.1 / Math.max(1, count)))); }
  function rawRange(values) {
    var lo = Infinity, hi = -Infinity;
    for (var i = 0; i < values.length; i++) { var v = values[i]; if (v < lo) lo = v; if (v > hi) hi = v; }
    return isFinite(lo) ? [lo, hi] : [0, 1];
  }
  function keyCount(d) { return d.keys || d.Lk; }  // an overview's tiles stand for d.keys keys
  function colourRange(d, ranges) {
    var lo = Math.min.apply(null, ranges.map(function (r) { return r[0]; }));
    var hi = Math.max.apply(null, ranges.map(function (r) { return r[1]; }));
    if (state.log) { var fl = logFloor(keyCount(d)); lo = Math.log10(fl); hi = Math.log10(Math.max(hi, fl)); }
    else lo = Math.min(0, lo);
    if (!(hi > lo)) hi = lo + 1;
    return [lo, hi];
  }
  function rint(x) { var r = Math.round(x); return (r - x === 0.5 && r % 2 !== 0) ? r - 1 : r; }
  function lut(name) {
    var c = doc.colormaps[name];
    if (!c.bytes) c.bytes = bytesOf(c.lut);
    return c;
  }
  function colourIndex(v, lo, hi, floor) {
    if (floor !== null) v = Math.log10(Math.max(v, floor));
    var s = (v - lo) / (hi - lo) * 255;
    if (!isFinite(s)) return 0;
    return Math.min(255, Math.max(0, rint(s)));
  }

  // ---- drawing ---------------------------------------------------------------------------------
  function paint(canvas, d, values, range) {
    var k = Math.max(1, Math.min(16, Math.floor(256 / Math.max(d.Lq, d.Lk))));
    var W = d.Lk * k, Hh = d.Lq * k, cm = lut(state.colormap), table = cm.bytes;
    canvas.width = W; canvas.height = Hh;
    var ctx = canvas.getContext("2d"), img = ctx.createImageData(W, Hh), px = img.data;
    var floor = state.log ? logFloor(keyCount(d)) : null;
    for (var q = 0; q < d.Lq; q++) {
      for (var c = 0; c < d.Lk; c++) {
        var cell = q * d.Lk + c, masked = d.mask && !d.mask[cell], r, g, b;
        if (!masked) { var i3 = 3 * colourIndex(values[cell], range[0], range[1], floor); r = table[i3]; g = table[i3 + 1]; b = table[i3 + 2]; }
        for (var y = q * k; y < (q + 1) * k; y++) {
          for (var x = c * k, o = 4 * (y * W + x); x < (c + 1) * k; x++, o += 4) {
            if (masked) { var col = (((x + y) >> 1) % 2 === 0) ? cm.hatch : cm.mask; r = col[0]; g = col[1]; b = col[2]; }
            px[o] = r; px[o + 1] = g; px[o + 2] = b; px[o + 3] = 255;
          }
        }
      }
    }
    ctx.putImageData(img, 0, 0);
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function mapBox(d, head, values, range, onHover) {
    var box = el("div", "map"), canvas = el("canvas"), hl = el("div", "hl");
    box.style.aspectRatio = d.Lk + " / " + d.Lq;
    box.dataset.head = String(head);
    paint(canvas, d, values, range);
    box.appendChild(canvas); box.appendChild(hl);
    box.addEventListener("mousemove", function (ev) {
      var rect = canvas.getBoundingClientRect();
      var c = Math.floor((ev.clientX - rect.left) / rect.width * d.Lk), q = Math.floor((ev.clientY - rect.top) / rect.height * d.Lq);
      if (q >= 0 && q < d.Lq && c >= 0 && c < d.Lk) (onHover || hover)(head, q, c); else clearHover();
    });
    box.addEventListener("mouseleave", clearHover);
    return box;
  }
  function heads(d) {
    if (state.target === "mean") return ["mean"];
    var out = [];
    for (var h = 0; h < d.H; h++) out.push(h);
    return out;
  }
  function ranges(d, hs, of) {
    var raw = hs.map(function (h) { return rawRange((of || matrix)(d, h)); });
    if (state.shared) { var r = colourRange(d, raw); return hs.map(function () { return r; }); }
    return raw.map(function (one) { return colourRange(d, [one]); });
  }
  function headTitle(d, h) {
    if (h === "mean") return "mean over " + d.H + " heads";
    var t = d.entry.heads[h], kv = d.entry.kv_heads;
    if (kv && kv < d.H) t += " (kv " + Math.floor(h / (d.H / kv)) + ")";
    return t;
  }
  function renderGrid() {
    var d = layerData(state.layer), grid = document.getElementById("grid"), hs = heads(d), rs = ranges(d, hs);
    grid.textContent = "";
    document.getElementById("layer-summary").textContent = layers.length > 1 ? d.entry.summary : "";
    grid.style.setProperty("--tile", hs.length === 1 ? "420px" : d.H > 8 ? "150px" : "190px");
    hs.forEach(function (h, i) {
      var tile = el("div", "tile");
      tile.appendChild(el("div", "tile-title", headTitle(d, h)));
      tile.appendChild(mapBox(d, h, matrix(d, h), rs[i]));
      tile.addEventListener("click", function () { enlarge(h); });
      grid.appendChild(tile);
    });
    renderBar(d, hs, rs);
    renderOverview(d, hs);
    renderStrip(d);
    state.ranges = rs;
    state.heads = hs;
  }

  // ---- overview of the whole input (a page of a run too large for exact weights) --------------
  function overviewData(index) {
    var d = layerData(index), o = d.entry.overview;
    if (!o) return null;
    if (!d.overview) {
      var shape = o.weights.shape;
      d.overview = { entry: d.entry, o: o, H: shape[0] - 1, Lq: shape[1], Lk: shape[2], keys: o.cols,
                     w: decodeWeights(o.weights) };
      d.overview.mask = decodeMask(o.mask, shape[1] * shape[2]);
    }
    return d.overview;
  }
  function overviewMatrix(od, head) {
    var n = od.Lq * od.Lk, i = head === "mean" ? od.H : head;
    return od.w.subarray(i * n, (i + 1) * n);
  }
  function regionBox(od) {
    var e = od.entry, o = od.o, rows = od.Lq * o.factor, cols = od.Lk * o.factor, box = el("div", "region");
    var q0 = e.first_query || 0, k0 = e.first_key || 0;
    box.style.top = (q0 / rows * 100) + "%"; box.style.left = (k0 / cols * 100) + "%";
    box.style.height = (e.queries.length / rows * 100) + "%"; box.style.width = (e.keys.length / cols * 100) + "%";
    return box;
  }
  function renderOverview(d, hs) {
    var section = document.getElementById("overview"), od = overviewData(state.layer);
    section.textContent = "";
    section.hidden = !od;
    if (!od) return;
    var o = od.o, e = d.entry, q0 = e.first_query || 0, k0 = e.first_key || 0, rs = ranges(od, hs, overviewMatrix);
    section.appendChild(el("h2", null, "The whole input: " + o.rows + " × " + o.cols + " tokens"));
    section.appendChild(el("p", "note", "Each pixel is the largest weight of " + o.factor + " × " + o.factor +
      " cells (the overview of the long-document pyramid). The outlined block, queries " + q0 + "–" +
      (q0 + e.queries.length - 1) + " × keys " + k0 + "–" + (k0 + e.keys.length - 1) + ", is below with its exact weights."));
    var grid = el("div", "ov-grid");
    grid.style.setProperty("--tile", hs.length === 1 ? "420px" : od.H > 8 ? "150px" : "190px");
    hs.forEach(function (h, i) {
      var tile = el("div", "tile ov-tile"), box = mapBox(od, h, overviewMatrix(od, h), rs[i],
        function (head, r, c) { hoverOverview(od, head, r, c); });
      box.appendChild(regionBox(od));
      tile.appendChild(el("div", "tile-title", headTitle(d, h)));
      tile.appendChild(box);
      grid.appendChild(tile);
    });
    section.appendChild(grid);
    section.appendChild(el("h2", null, "Exact weights: queries " + q0 + "–" + (q0 + e.queries.length - 1) + " × keys " +
      k0 + "–" + (k0 + e.keys.length - 1)));
  }
  function hoverOverview(od, head, r, c) {
    var o = od.o, f = o.factor, cell = r * od.Lk + c, v = overviewMatrix(od, head)[cell];
    var q0 = r * f, q1 = Math.min(o.rows, q0 + f) - 1, k0 = c * f, k1 = Math.min(o.cols, k0 + f) - 1;
    var masked = od.mask && !od.mask[cell], who = head === "mean" ? "mean of heads" : headTitle(layerData(state.layer), head);
    document.querySelectorAll("#overview .hl").forEach(function (hl) {
      hl.style.display = "block";
      hl.style.left = (c / od.Lk * 100) + "%"; hl.style.top = (r / od.Lq * 100) + "%";
      hl.style.width = (100 / od.Lk) + "%"; hl.style.height = (100 / od.Lq) + "%";
    });
    var out = document.getElementById("readout");
    out.textContent = who + " · queries " + q0 + "–" + q1 + " → keys " + k0 + "–" + k1 + ": largest weight " +
      (o.weights.dtype === "float16" ? "≈" : "") + formatWeight(v) + (masked ? " (masked)" : "");
    out.className = "readout"; out.dataset.value = String(v); out.dataset.kind = "overview";
    markTokens(-1, -1);
  }

  // ---- colour bar ------------------------------------------------------------------------------
  function niceTicks(lo, hi) {
    var span = hi - lo, step = Math.pow(10, Math.floor(Math.log10(span / 4)));
    [1, 2, 5, 10].some(function (m) { if (span / (m * step) <= 5) { step *= m; return true; } return false; });
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + 1e-12; t += step) out.push(Math.abs(t) < step * 1e-9 ? 0 : t);
    return out;
  }
  function renderBar(d, hs, rs) {
    var relative = !state.shared && !state.log && hs.length > 1 &&
      rs.some(function (r) { return r[0] !== rs[0][0] || r[1] !== rs[0][1]; });
    var lo = relative ? 0 : rs[0][0], hi = relative ? 1 : rs[0][1];
    var canvas = document.getElementById("bar-canvas"), ctx = canvas.getContext("2d"), img = ctx.createImageData(1, 256);
    var table = lut(state.colormap).bytes;
    for (var y = 0; y < 256; y++) { var i = 255 - y; img.data.set([table[3 * i], table[3 * i + 1], table[3 * i + 2], 255], 4 * y); }
    ctx.putImageData(img, 0, 0);
    var ticks = document.getElementById("bar-ticks");
    ticks.textContent = "";
    niceTicks(lo, hi).forEach(function (t) {
      var s = el("span", null, state.log ? "1e" + Math.round(t) : relative ? Math.round(t * 100) + "%" : +t.toPrecision(3) + "");
      if (state.log && Math.abs(t - Math.round(t)) > 1e-9) return;
      s.style.top = ((hi - t) / (hi - lo) * 256) + "px";
      ticks.appendChild(s);
    });
    document.getElementById("bar-label").textContent = relative ? "share of each head's range" :
      state.log ? "attention weight (log scale)" : "attention weight";
  }

  // ---- hover, tokens ---------------------------------------------------------------------------
  function formatWeight(v) { return (v === 0 || Math.abs(v) >= 0.01) ? v.toFixed(4) : (+v.toPrecision(3)).toString(); }
  function hover(head, q, c) {
    var d = layerData(state.layer), e = d.entry, cell = q * d.Lk + c, v = matrix(d, head)[cell];
    var masked = d.mask && !d.mask[cell];
    state.hover = { head: head, q: q, k: c, value: v };
    document.querySelectorAll("#grid .hl, #enlarged .hl").forEach(function (hl) {
      hl.style.display = "block";
      hl.style.left = (c / d.Lk * 100) + "%"; hl.style.top = (q / d.Lq * 100) + "%";
      hl.style.width = (100 / d.Lk) + "%"; hl.style.height = (100 / d.Lq) + "%";
    });
    var who = head === "mean" ? "mean of heads" : headTitle(d, head);
    var text = who + ' · query "' + e.queries[q] + '" (' + (q + (e.first_query || 0)) + ') → key "' + e.keys[c] +
      '" (' + (c + (e.first_key || 0)) + "): " + (e.weights.dtype === "float16" ? "≈" : "") + formatWeight(v) +
      (masked ? " (masked)" : "");
    var out = document.getElementById("readout");
    out.textContent = text; out.className = "readout"; out.dataset.value = String(v); out.dataset.kind = "exact";
    markTokens(q, c);
  }
  function clearHover() {
    state.hover = null;
    document.querySelectorAll(".hl").forEach(function (hl) { hl.style.display = "none"; });
    var out = document.getElementById("readout");
    out.textContent = "Hover a cell for its exact weight · click a heatmap to enlarge it";
    out.className = "readout hint"; delete out.dataset.value; delete out.dataset.kind;
    markTokens(-1, -1);
  }
  function renderStrip(d) {
    var strip = document.getElementById("strip"), e = d.entry, same = e.queries.join("\u0000") === e.keys.join("\u0000");
    strip.textContent = "";
    function row(label, tokens, cls) {
      strip.appendChild(el("div", "axis", label));
      tokens.forEach(function (t, i) { var s = el("span", "tok", t); s.dataset[cls] = String(i); s.title = cls + " " + i; strip.appendChild(s); });
    }
    row(same ? "tokens (queries and keys)" : "query tokens", e.queries, "q");
    if (!same) row("key tokens", e.keys, "k");
    strip.dataset.same = same ? "1" : "";
  }
  function markTokens(q, c) {
    var strip = document.getElementById("strip"), same = strip.dataset.same === "1";
    strip.querySelectorAll(".tok").forEach(function (s) {
      var qi = s.dataset.q !== undefined ? +s.dataset.q : -2, ki = s.dataset.k !== undefined ? +s.dataset.k : -2;
      s.classList.toggle("q", qi === q);
      s.classList.toggle("k", same ? qi === c : ki === c);
    });
  }

  // ---- enlarged --------------------------------------------------------------------------------
  function labels(cls, tokens, cell, vertical) {
    var box = el("div", cls), step = Math.max(1, Math.ceil(12 / cell));
    tokens.forEach(function (t, i) {
      if (i % step) return;
      var s = el("span", null, t);
      if (vertical) s.style.top = ((i + 0.5) * cell) + "px"; else s.style.left = ((i + 0.5) * cell) + "px";
      box.appendChild(s);
    });
    return box;
  }
  function enlarge(head) {
    var d = layerData(state.layer), index = state.heads.indexOf(head), range = state.ranges[index];
    var cell = Math.max(1, Math.min(40, Math.floor(Math.min(window.innerWidth * 0.75 / d.Lk, window.innerHeight * 0.7 / d.Lq))));
    var body = document.getElementById("enlarged-body"), big = el("div", "big"), box = mapBox(d, head, matrix(d, head), range);
    box.style.width = (cell * d.Lk) + "px";
    var ylab = labels("ylabels", d.entry.queries, cell, true), xlab = labels("xlabels", d.entry.keys, cell, false);
    ylab.style.minWidth = "90px"; xlab.style.height = "90px";
    big.appendChild(ylab); big.appendChild(box); big.appendChild(el("div")); big.appendChild(xlab);
    body.textContent = ""; body.appendChild(big);
    document.getElementById("enlarged-title").textContent = headTitle(d, head) + " · " + layerName(state.layer);
    state.big = head;
    document.getElementById("enlarged").hidden = false;
  }
  function closeEnlarged() {
    document.getElementById("enlarged").hidden = true;
    document.getElementById("enlarged-body").textContent = "";
    state.big = null; clearHover();
  }

  // ---- data as CSV -----------------------------------------------------------------------------
  function shortest(v) {
    if (!isFinite(v)) return String(v);
    for (var p = 1; p < 10; p++) { var s = v.toPrecision(p); if (Math.fround(+s) === v) return String(+s); }
    return String(v);
  }
  function quote(t) { return /[",\n\r]/.test(t) ? '"' + t.replace(/"/g, '""') + '"' : t; }
  function csvMatrix(index, head) {
    var d = layerData(index), m = matrix(d, head), lines = [["query \\ key"].concat(d.entry.keys).map(quote).join(",")];
    for (var q = 0; q < d.Lq; q++) {
      var row = [quote(d.entry.queries[q])];
      for (var c = 0; c < d.Lk; c++) row.push(shortest(m[q * d.Lk + c]));
      lines.push(row.join(","));
    }
    return lines.join("\n") + "\n";
  }
  function csvLong(index) {
    var d = layerData(index), e = d.entry, lines = ["part,layer,head,query_index,query,key_index,key,weight"];
    for (var h = 0; h < d.H; h++) {
      var m = matrix(d, h), pre = quote(e.part || "self") + "," + (e.layer === null || e.layer === undefined ? "" : e.layer) + "," + quote(e.heads[h]) + ",";
      for (var q = 0; q < d.Lq; q++) {
        var qp = pre + (q + (e.first_query || 0)) + "," + quote(e.queries[q]) + ",";
        for (var c = 0; c < d.Lk; c++) lines.push(qp + (c + (e.first_key || 0)) + "," + quote(e.keys[c]) + "," + shortest(m[q * d.Lk + c]));
      }
    }
    return lines.join("\n") + "\n";
  }
  function download(link, name, makeText) {
    link.addEventListener("click", function () {
      if (link.href && link.href.indexOf("blob:") === 0) URL.revokeObjectURL(link.href);
      link.href = URL.createObjectURL(new Blob([makeText()], { type: "text/csv" }));
      link.download = name();
    });
  }

  // ---- a corpus store: the per-head grid and the per-text table --------------------------------
  function fmtNumber(v) { return v === null || v === undefined ? "–" : Math.abs(v) >= 100 ? v.toFixed(1) : (+v.toPrecision(4)).toString(); }
  function corpusRange(c) {
    var lo = Infinity, hi = -Infinity;
    c.values[state.metric].forEach(function (row) { row.forEach(function (v) { if (v !== null) { if (v < lo) lo = v; if (v > hi) hi = v; } }); });
    if (!isFinite(lo)) return [0, 1];
    return hi > lo ? [lo, hi] : [lo, lo + 1];
  }
  function paintHeads(c) {
    var range = corpusRange(c), table = lut(state.colormap).bytes;
    document.querySelectorAll("#corpus .hcell").forEach(function (cell) {
      var v = c.values[state.metric][+cell.dataset.row][+cell.dataset.head];
      cell.classList.toggle("nan", v === null);
      if (v === null) { cell.style.background = ""; return; }
      var i3 = 3 * colourIndex(v, range[0], range[1], null);
      cell.style.background = "rgb(" + table[i3] + "," + table[i3 + 1] + "," + table[i3 + 2] + ")";
    });
    document.getElementById("heads-range").textContent = state.metric + ": " + fmtNumber(range[0]) + " (dark) to " +
      fmtNumber(range[1]) + " (bright); striped: no value";
  }
  function hoverHead(c, r, h) {
    var v = c.values[state.metric][r][h], role = c.roles[r][h], out = document.getElementById("corpus-readout");
    var others = c.metrics.filter(function (m) { return m !== state.metric; })
      .map(function (m) { return m + " " + fmtNumber(c.values[m][r][h]); });
    out.textContent = c.rows[r].names[h] + ": " + state.metric + " = " + fmtNumber(v) + " · role " +
      role + " · " + others.join(" · ");
    out.className = "readout"; out.dataset.value = v === null ? "" : String(v); out.dataset.role = role;
  }
  function headsGrid(c) {
    var grid = el("div", "heads-grid");
    grid.style.gridTemplateColumns = "auto repeat(" + c.heads + ", 26px)";
    grid.appendChild(el("div"));
    for (var h = 0; h < c.heads; h++) grid.appendChild(el("div", "col-label", String(h)));
    c.rows.forEach(function (row, r) {
      grid.appendChild(el("div", "row-label", row.label));
      for (var h = 0; h < c.heads; h++) {
        var cell = el("div", "hcell");
        cell.dataset.row = String(r); cell.dataset.head = String(h);
        cell.addEventListener("mouseenter", hoverHead.bind(null, c, r, h));
        grid.appendChild(cell);
      }
    });
    grid.addEventListener("mouseleave", function () {
      var out = document.getElementById("corpus-readout");
      out.textContent = "Hover a head for its numbers and role"; out.className = "readout hint"; delete out.dataset.value;
    });
    return grid;
  }
  function textsTable(t) {
    var wrap = el("div", "texts-wrap"), table = el("table"), head = el("tr");
    table.id = "texts";
    t.columns.forEach(function (name) { head.appendChild(el("th", null, name)); });
    table.appendChild(head);
    t.rows.forEach(function (row) {
      var tr = el("tr");
      row.forEach(function (v, i) {
        var name = t.columns[i], text = name === "text" ? v : name === "cut" ? (v ? "yes" : "") :
          typeof v === "number" && name !== "text_id" && name !== "tokens" ? fmtNumber(v) : v === null ? "–" : String(v);
        tr.appendChild(el("td", name === "text" ? "text" : null, text));
      });
      table.appendChild(tr);
    });
    wrap.appendChild(table);
    return wrap;
  }
  function renderCorpus() {
    var c = doc.corpus, box = document.getElementById("corpus");
    if (!c) return;
    state.metric = c.metric;
    box.hidden = false;
    box.appendChild(el("h2", null, "Heads over the corpus (" + c.rows.length + " layers × " + c.heads + " heads)"));
    var bar = el("div", "corpus-controls");
    bar.appendChild(select("Colour by", c.metrics.map(function (m) { return [m, m]; }), state.metric,
      function (v) { state.metric = v; paintHeads(c); }));
    bar.lastChild.querySelector("select").id = "metric-select";
    bar.appendChild(el("span", "role-key")).id = "heads-range";
    box.appendChild(bar);
    var out = el("div", "readout hint", "Hover a head for its numbers and role");
    out.id = "corpus-readout";
    box.appendChild(out);
    box.appendChild(headsGrid(c));
    paintHeads(c);
    var t = c.texts;
    box.appendChild(el("h2", null, "Texts" + (t.rows.length < t.total ? " (the first " + t.rows.length + " of " + t.total + ")" : " (" + t.total + ")")));
    box.appendChild(el("p", "note", "Each metric is the mean over the text's heads; 'cut': the text had more tokens than the run kept."));
    box.appendChild(textsTable(t));
    if (layers.length) {
      var texts = [];
      layers.forEach(function (e) { if (texts.indexOf(e.text_id) < 0) texts.push(e.text_id); });
      box.appendChild(el("h2", null, "Attention of text" + (texts.length > 1 ? "s " : " ") + texts.join(", ")));
    }
  }

  // ---- controls, summary -----------------------------------------------------------------------
  var PART_NAMES = { self: "encoder", decoder: "decoder", cross: "cross-attention" };
  function textOf(e) { return e.text_id === undefined ? null : e.text_id; }
  function layerIn(part, layer, text) {
    var best = -1;
    layers.forEach(function (e, i) {
      if ((e.part || "self") === part && textOf(e) === text && (best < 0 || e.layer === layer)) best = i;
    });
    return best;
  }
  function layerName(i) {
    var e = layers[i], part = { self: layers.some(function (o) { return o.part === "cross"; }) ? "encoder" : "",
                                decoder: "decoder", cross: "cross-attention" }[e.part || "self"];
    var name = e.layer === null || e.layer === undefined ? "" : "layer " + e.layer;
    return [part, name].filter(Boolean).join(" ") || e.title || "weights";
  }
  function select(label, options, value, onChange) {
    var wrap = el("label", null, label + " "), s = el("select");
    options.forEach(function (o) { var opt = el("option", null, o[1]); opt.value = o[0]; s.appendChild(opt); });
    s.value = value;
    s.addEventListener("change", function () { onChange(s.value); });
    wrap.appendChild(s);
    return wrap;
  }
  function checkbox(label, value, onChange) {
    var wrap = el("label"), c = el("input");
    c.type = "checkbox"; c.checked = value;
    c.addEventListener("change", function () { onChange(c.checked); });
    wrap.appendChild(c); wrap.appendChild(document.createTextNode(label));
    return wrap;
  }
  function stem() { return (doc.title || "attention").replace(/[^A-Za-z0-9.-]+/g, "_").slice(0, 80); }
  function buildControls() {
    var nav = document.getElementById("controls");
    var parts = [];
    layers.forEach(function (e) { if (parts.indexOf(e.part || "self") < 0) parts.push(e.part || "self"); });
    if (parts.length > 1) {
      nav.appendChild(select("Part", parts.map(function (p) { return [p, PART_NAMES[p]]; }), parts[0],
        function (v) { var e = layers[state.layer]; state.layer = layerIn(v, e.layer, textOf(e)); renderLayers(); renderGrid(); }));
      nav.lastChild.querySelector("select").id = "part-select";
    }
    var texts = [];
    layers.forEach(function (e) { if (textOf(e) !== null && texts.indexOf(e.text_id) < 0) texts.push(e.text_id); });
    if (texts.length > 1) {
      nav.appendChild(select("Text", texts.map(function (t) { return [String(t), "text " + t]; }), String(texts[0]),
        function (v) {
          var e = layers[state.layer], i = layerIn(e.part || "self", e.layer, +v);
          state.layer = i >= 0 ? i : layers.findIndex(function (o) { return o.text_id === +v; });
          renderLayers(); renderGrid();
        }));
      nav.lastChild.querySelector("select").id = "text-select";
    }
    var layerBox = el("span");
    nav.appendChild(layerBox);
    function renderLayers() {
      var part = layers[state.layer].part || "self", options = [];
      var text = textOf(layers[state.layer]);
      layers.forEach(function (e, i) { if ((e.part || "self") === part && textOf(e) === text) options.push([String(i), "layer " + (e.layer === null || e.layer === undefined ? i : e.layer)]); });
      layerBox.textContent = "";
      layerBox.hidden = options.length < 2;
      if (options.length < 2) return;
      layerBox.appendChild(select("Layer", options, String(state.layer), function (v) { state.layer = +v; renderGrid(); }));
      layerBox.querySelector("select").id = "layer-select";
    }
    renderLayers();
    nav.appendChild(select("Show", [["all", "all heads"], ["mean", "mean over heads"]], state.target,
      function (v) { state.target = v; renderGrid(); }));
    nav.appendChild(select("Colours", Object.keys(doc.colormaps).filter(function (n) { return n.indexOf("CET-D") !== 0; })
      .map(function (n) { return [n, n]; }), state.colormap, function (v) { state.colormap = v; renderGrid(); }));
    nav.appendChild(checkbox("one scale for all heads", state.shared, function (v) { state.shared = v; renderGrid(); }));
    nav.appendChild(checkbox("log scale", state.log, function (v) { state.log = v; renderGrid(); }));
    var link = el("a", null, "data (CSV)");
    link.id = "data-link"; link.href = "#"; link.title = "the weights of every head of this layer, as CSV";
    download(link, function () { return stem() + "_" + layerName(state.layer).replace(/ /g, "") + ".csv"; },
      function () { return csvLong(state.layer); });
    nav.appendChild(link);
    download(document.getElementById("enlarged-csv"),
      function () { return stem() + "_" + layerName(state.layer).replace(/ /g, "") + "_" + state.big + ".csv"; },
      function () { return csvMatrix(state.layer, state.big); });
  }
  function buildDetails() {
    document.getElementById("summary").textContent = doc.summary || (layers.length ? layers[0].summary : "") || "";
    document.getElementById("generator").textContent = doc.generator || "attndesk";
    var half = layers.some(function (e) { return e.weights.dtype === "float16"; });
    document.getElementById("precision").textContent = half ?
      "The weights are stored as float16: within 0.0005 of attndesk's float32 weights (≈ in the read-out)." :
      "The weights are stored as float32: exactly attndesk's.";
    var table = document.getElementById("settings"), rows = Object.keys(doc.settings || {});
    rows.forEach(function (key) {
      var tr = el("tr"), v = doc.settings[key];
      tr.appendChild(el("td", null, key));
      tr.appendChild(el("td", null, typeof v === "object" && v !== null ? JSON.stringify(v) : String(v)));
      table.appendChild(tr);
    });
    var notes = {};
    layers.forEach(function (e) { (e.notices || []).forEach(function (n) { notes[n] = 1; }); });
    Object.keys(notes).forEach(function (n) { document.getElementById("notices").appendChild(el("li", null, n)); });
  }

  function renderImage() {  // a vision run: the image and its overlays, as the figures were written
    var image = doc.image, box = document.getElementById("image");
    if (!image) return;
    box.appendChild(el("h2", null, "Image · " + image.grid[0] + " x " + image.grid[1] + " patches"));
    (image.figures || []).forEach(function (f) {
      var fig = el("figure"), img = el("img");
      img.src = "data:image/png;base64," + f.png;
      img.alt = f.title;
      fig.appendChild(img);
      fig.appendChild(el("figcaption", null, f.title));
      box.appendChild(fig);
    });
    box.hidden = false;
  }

  var svgSpace = null;  // SVG's namespace, as the HTML parser gives it (the page names no URL)
  function svg(tag, attrs) {
    if (svgSpace === null) {
      var probe = document.createElement("div");
      probe.innerHTML = "<svg></svg>";
      svgSpace = probe.firstChild.namespaceURI;
    }
    var node = document.createElementNS(svgSpace, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    return node;
  }
  function renderCircuit() {  // an edge circuit: its graph and its faithfulness curve
    var c = doc.circuit, box = document.getElementById("circuit");
    if (!c) return;
    box.appendChild(el("h2", null, "Circuit · " + c.edges.length + " of " + c.total + " edges"));
    var W = 1000, H = 520, pad = 60, where = {};
    var graph = svg("svg", { id: "circuit-graph", width: W, height: H, viewBox: "0 0 " + W + " " + H });
    c.nodes.forEach(function (n) { where[n.name] = [pad + n.x * (W - 2 * pad), pad + n.y * (H - 2 * pad)]; });
    var biggest = c.edges.reduce(function (m, e) { return Math.max(m, Math.abs(e.score)); }, 0) || 1;
    var dashes = { k: "8 5", v: "2 4" }, used = {};
    c.edges.forEach(function (e) {  // width by |score|, red positive, blue negative
      var a = where[e.src], b = where[e.dst];
      var line = svg("line", { x1: a[0], y1: a[1], x2: b[0], y2: b[1], "class": "edge",
        stroke: e.score >= 0 ? "#c0392b" : "#2f5fbf", "stroke-width": (0.75 + 6 * Math.abs(e.score) / biggest).toFixed(3),
        "stroke-opacity": 0.8 });
      if (dashes[e.kind]) line.setAttribute("stroke-dasharray", dashes[e.kind]);
      line.dataset.edge = e.src + " -> " + e.dst + " (" + e.kind + ")";
      line.appendChild(svg("title")).textContent = line.dataset.edge + ": " + e.score.toPrecision(4);
      graph.appendChild(line);
      used[e.src] = used[e.dst] = 1;
    });
    c.nodes.forEach(function (n) {
      var p = where[n.name], g = svg("g", { "class": "node" });
      g.appendChild(svg("circle", { cx: p[0], cy: p[1], r: 5, fill: used[n.name] ? "#222" : "#bbb" }));
      var label = g.appendChild(svg("text", { x: p[0] + 7, y: p[1] + 4, "font-size": 10, fill: used[n.name] ? "#222" : "#999" }));
      label.textContent = n.name;
      graph.appendChild(g);
    });
    box.appendChild(graph);
    var k = c.curve, n = k.size.length, CW = 640, CH = 320, m = 50;
    var top = Math.max.apply(null, [1].concat(k.faithfulness, k.random_mean.map(function (v, i) {
      return v === null ? 1 : v + (k.random_std[i] || 0); })));
    var bottom = Math.min.apply(null, [0].concat(k.faithfulness, k.random_mean.map(function (v, i) {
      return v === null ? 0 : v - (k.random_std[i] || 0); })));
    var most = Math.max.apply(null, k.size) || 1;
    function X(s) { return m + (CW - 2 * m) * s / most; }
    function Y(v) { return CH - m - (CH - 2 * m) * (v - bottom) / ((top - bottom) || 1); }
    var plot = svg("svg", { id: "circuit-curve", width: CW, height: CH, viewBox: "0 0 " + CW + " " + CH });
    plot.appendChild(svg("line", { x1: m, y1: CH - m, x2: CW - m, y2: CH - m, stroke: "#888" }));
    plot.appendChild(svg("line", { x1: m, y1: m, x2: m, y2: CH - m, stroke: "#888" }));
    [0, 1].forEach(function (v) {
      var t = plot.appendChild(svg("text", { x: m - 8, y: Y(v) + 4, "text-anchor": "end", "font-size": 11 }));
      t.textContent = String(v);
    });
    var xl = plot.appendChild(svg("text", { x: CW / 2, y: CH - 12, "text-anchor": "middle", "font-size": 12 }));
    xl.textContent = "edges in the circuit (of " + c.total + ")";
    var upper = [], lower = [], mean = [];
    for (var i = 0; i < n; i++) {
      if (k.random_mean[i] === null) continue;
      var sd = k.random_std[i] || 0;
      upper.push(X(k.size[i]) + "," + Y(k.random_mean[i] + sd));
      lower.unshift(X(k.size[i]) + "," + Y(k.random_mean[i] - sd));
      mean.push(X(k.size[i]) + "," + Y(k.random_mean[i]));
    }
    if (mean.length) {
      plot.appendChild(svg("polygon", { id: "random-band", points: upper.concat(lower).join(" "), fill: "#999", "fill-opacity": 0.25 }));
      plot.appendChild(svg("polyline", { id: "random-mean", points: mean.join(" "), fill: "none", stroke: "#777", "stroke-dasharray": "5 4" }));
    }
    plot.appendChild(svg("polyline", { id: "faithfulness", fill: "none", stroke: "#c0392b", "stroke-width": 2,
      points: k.size.map(function (s, j) { return X(s) + "," + Y(k.faithfulness[j]); }).join(" ") }));
    box.appendChild(plot);
    box.appendChild(el("p", "hint", "faithfulness (red) beside random edge sets of the same sizes (grey: mean and one standard deviation); " +
      "edges: width by |score|, red positive, blue negative, key inputs dashed, value inputs dotted"));
    box.hidden = false;
  }

  renderCorpus();
  renderImage();
  renderCircuit();
  if (layers.length) {
    buildControls();
    renderGrid();
    clearHover();
  } else {  // a corpus page without texts, a circuit's page: only their section and the details
    ["controls", "layer-summary", "readout", "view", "strip"].forEach(function (id) { document.getElementById(id).hidden = true; });
  }
  buildDetails();
  document.getElementById("enlarged-close").addEventListener("click", closeEnlarged);
  document.getElementById("enlarged").addEventListener("click", function (ev) { if (ev.target.id === "enlarged") closeEnlarged(); });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape" && state.big !== null) closeEnlarged(); });
  window.attndesk = {
    doc: doc, state: state, layers: layers, readyMs: performance.now(),
    weights: function (index, head) { return Array.from(matrix(layerData(index), head)); },
    csvMatrix: csvMatrix, csvLong: csvLong, enlarge: enlarge, close: closeEnlarged,
    setLayer: function (i) { state.layer = i; renderGrid(); }
  };
  document.body.dataset.ready = "1";
})();
