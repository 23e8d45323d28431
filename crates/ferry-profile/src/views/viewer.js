// ferry view: the interactive swimlane. Reads the JSON header in #ferry-data (its `data` field
// is the raw-DEFLATE varint stream described in viewer.rs), draws on one canvas, and keeps its
// state in window.ferryView for scripts and tests.
(function () {
  'use strict';
  const D = JSON.parse(document.getElementById('ferry-data').textContent);
  const V = (window.ferryView = {
    ready: false, error: null, firstFrameMs: null, frames: 0,
    visible: { start: 0, end: D.span }, span: D.span, rects: 0, hitRects: 0,
    query: '', searchHits: 0, searchSlices: 0, selected: null,
    rows: D.rows.map((r) => r.label), folded: D.folded.slice(), series: D.series.map((s) => s.name),
    tasks: D.tasks, slices: 0,
    // The task whose kernel failed (a failed run's profile): its label, and the markers drawn.
    failed: D.failed ? { label: D.failed.label, ran: D.failed.task >= 0 } : null, failedMarks: 0,
  });
  const $ = (id) => document.getElementById(id);
  const ROW = 14, HEAD = 16, AXIS = 22, SERIES = 34, LABEL = 210;
  const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#76b7b2', '#edc948', '#9c755f',
    '#e15759', '#17becf', '#bcbd22', '#8c564b', '#7f7f7f'];
  const STALL = '#d62728', ORCH = '#8fa3b8', DIM = '#d5d5d5', FAILED = '#ff0000';

  // ---- decoding ----
  async function inflate(b64) {
    const bin = atob(b64);
    const u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    const s = new Blob([u8]).stream().pipeThrough(new DecompressionStream('deflate-raw'));
    return new Uint8Array(await new Response(s).arrayBuffer());
  }
  let buf, p = 0;
  function u() {
    let r = 0, m = 1, b;
    do { b = buf[p++]; r += (b & 127) * m; m *= 128; } while (b & 128);
    return r;
  }
  function z() { const v = u(); return v % 2 ? -(v + 1) / 2 : v / 2; }

  const R = []; // rows: {label, group, kind, S, E, N, T}
  let T = 0, idHi, idLo, kernel, blocks, pmuHas, pmuCore, pmuVals, argOff, argBuf;
  let predStart, predList, succStart, succList, firstRow, firstIdx;
  const series = [];

  function decode() {
    for (const r of D.rows) {
      const n = r.n, S = new Float64Array(n), E = new Float64Array(n);
      const N = new Uint32Array(n), Tk = new Int32Array(n);
      let t = 0;
      for (let i = 0; i < n; i++) {
        t += u(); S[i] = t; E[i] = t + u(); N[i] = u(); Tk[i] = u() - 1;
      }
      // Busy time: each slice's duration summed (C, for the busy time inside any span) and the
      // union of the slices over the run (the row's busy fraction).
      const C = new Float64Array(n + 1);
      let union = 0, reach = -Infinity;
      for (let i = 0; i < n; i++) {
        C[i + 1] = C[i] + (E[i] - S[i]);
        if (E[i] > reach) { union += E[i] - Math.max(S[i], reach); reach = E[i]; }
      }
      const busy = D.span > 0 ? union / D.span : 0;
      // The failed task's slices on the row, marked whatever the zoom.
      const failed = [];
      if (D.failed && D.failed.task >= 0) for (let i = 0; i < n; i++) if (Tk[i] === D.failed.task) failed.push(i);
      R.push({ label: r.label, group: r.group, kind: r.kind, S, E, N, T: Tk, C, busy, failed });
      V.slices += n;
    }
    T = D.tasks;
    idHi = new Float64Array(T); idLo = new Float64Array(T);
    kernel = new Int32Array(T); blocks = new Uint32Array(T);
    for (let i = 0; i < T; i++) { idHi[i] = u(); idLo[i] = u(); kernel[i] = u() - 1; blocks[i] = u(); }
    const K = D.pmu.length;
    pmuHas = new Uint8Array(T); pmuCore = new Uint32Array(T); pmuVals = new Float64Array(T * K);
    for (let i = 0; i < T; i++) {
      if (!u()) continue;
      pmuHas[i] = 1; pmuCore[i] = u();
      for (let k = 0; k < K; k++) pmuVals[i * K + k] = u();
    }
    argOff = new Uint32Array(T + 1);
    for (let i = 0; i < T; i++) {
      argOff[i] = p;
      const n = u();
      for (let a = 0; a < n; a++) { u(); u(); u(); const d = u(); for (let k = 0; k < d; k++) u(); u(); u(); }
    }
    argOff[T] = p;
    argBuf = buf;
    // Edges (sorted by successor): predecessors as CSR; successors by a counting sort.
    const ne = D.edges, es = new Uint32Array(ne), ep = new Uint32Array(ne);
    for (let i = 0; i < ne; i++) { es[i] = u(); ep[i] = es[i] + z(); }
    predStart = new Uint32Array(T + 1); succStart = new Uint32Array(T + 1);
    for (let i = 0; i < ne; i++) { predStart[es[i] + 1]++; succStart[ep[i] + 1]++; }
    for (let i = 0; i < T; i++) { predStart[i + 1] += predStart[i]; succStart[i + 1] += succStart[i]; }
    predList = ep;
    succList = new Uint32Array(ne);
    const fill = succStart.slice(0, T);
    for (let i = 0; i < ne; i++) succList[fill[ep[i]]++] = es[i];
    for (const s of D.series) {
      const n = u(), t = new Float64Array(n), v = new Float64Array(n);
      let tt = 0, vv = 0, max = 0;
      for (let i = 0; i < n; i++) { tt += u(); vv += z(); t[i] = tt; v[i] = vv; if (vv > max) max = vv; }
      series.push({ name: s.name, group: s.group, unit: s.unit, t, v, max });
    }
    V.busy = R.map((r) => r.busy);
    V.kinds = R.map((r) => r.kind);
    // Each task's first slice (rows in page order: AICore first).
    firstRow = new Int32Array(T).fill(-1); firstIdx = new Int32Array(T);
    R.forEach((r, ri) => {
      for (let i = 0; i < r.T.length; i++) {
        const k = r.T[i];
        if (k >= 0 && firstRow[k] < 0) { firstRow[k] = ri; firstIdx[k] = i; }
      }
    });
  }

  // ---- helpers ----
  // A task id as every ferry command prints it: `0x40`, not `0x0000000000000040`.
  const hex = (i) => '0x' + (idHi[i] ? idHi[i].toString(16) + idLo[i].toString(16).padStart(8, '0')
    : idLo[i].toString(16));
  // The id a query names, as [hi, lo] (`0x40`, `40` and `0x0000000000000040` all name 0x40:
  // ids are hex everywhere); null for a query that is not a hex number.
  function idOf(q) {
    const h = q.replace(/^0x/, '').replace(/^0+(?=.)/, '');
    if (!/^[0-9a-f]{1,16}$/.test(h)) return null;
    const p16 = h.padStart(16, '0');
    return [parseInt(p16.slice(0, 8), 16), parseInt(p16.slice(8), 16)];
  }
  // The busy time of row r between times a and b (each slice's overlap with [a, b), summed).
  function busyIn(r, a, b) {
    const i0 = lowerBound(r.E, a), i1 = lowerBound(r.S, b);
    if (i1 <= i0) return 0;
    let t = r.C[i1] - r.C[i0];
    if (r.S[i0] < a) t -= a - r.S[i0];
    if (r.E[i1 - 1] > b) t -= r.E[i1 - 1] - b;
    return Math.max(0, t);
  }
  function pct(f) { return f >= 0.1 ? (100 * f).toFixed(0) + ' %' : f >= 0.001 ? (100 * f).toFixed(1) + ' %' : f > 0 ? '<0.1 %' : '0 %'; }
  function lowerBound(a, x, lo, hi) {
    lo = lo || 0; hi = hi === undefined ? a.length : hi;
    while (lo < hi) { const m = (lo + hi) >>> 1; if (a[m] < x) lo = m + 1; else hi = m; }
    return lo;
  }
  function fmt(ns) {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + ' s';
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + ' ms';
    if (a >= 1e3) return (ns / 1e3).toFixed(3) + ' µs';
    return Math.round(ns) + ' ns';
  }
  const colours = new Map();
  function colour(row, nameId) {
    if (row.kind === 'stall') return STALL;
    if (row.kind === 'orch') return ORCH;
    let c = colours.get(nameId);
    if (!c) { c = PALETTE[colours.size % PALETTE.length]; colours.set(nameId, c); }
    return c;
  }

  // ---- layout ----
  const canvas = $('fv-canvas'), ctx = canvas.getContext('2d'), scroller = $('fv-scroll');
  const layout = []; // {y, h, type: 'group'|'row'|'series', ref}
  let contentH = 0;
  function buildLayout() {
    let y = AXIS, group = null;
    R.forEach((r, i) => {
      if (r.group !== group) {
        group = r.group;
        const idle = D.folded.filter((l) => groupOf(l) === group).length;
        const label = group + (idle ? ' (' + idle + ' idle rows folded)' : '');
        layout.push({ y, h: HEAD, type: 'group', label });
        y += HEAD;
      }
      layout.push({ y, h: ROW, type: 'row', ref: i });
      r.y = y;
      y += ROW;
    });
    if (series.length) { layout.push({ y, h: HEAD, type: 'group', label: 'Counters' }); y += HEAD; }
    series.forEach((s) => { layout.push({ y, h: SERIES, type: 'series', ref: s }); s.y = y; y += SERIES; });
    contentH = y + 4;
    $('fv-spacer').style.height = contentH + 'px';
  }
  function groupOf(label) {
    if (/ dispatch-finish$/.test(label)) return 'Scheduler view';
    if (/^core\d+ /.test(label)) return 'AICore';
    return 'AICPU';
  }

  // ---- drawing ----
  let W = 0, H = 0, dpr = 1, pending = false, hits = null, hitOrder = [], hitCursor = -1;
  function resize() {
    dpr = window.devicePixelRatio || 1;
    W = scroller.clientWidth; H = Math.min(scroller.clientHeight, contentH);
    canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    canvas.style.width = W + 'px'; canvas.style.height = H + 'px';
  }
  function request() { if (!pending) { pending = true; requestAnimationFrame(frame); } }
  function frame() { pending = false; draw(); }
  function draw() {
    const t0 = V.visible.start, t1 = V.visible.end, PW = W - LABEL, k = PW / (t1 - t0);
    const top = scroller.scrollTop;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    ctx.font = '11px sans-serif';
    ctx.textBaseline = 'middle';
    let rects = 0, hitRects = 0, failedMarks = 0;
    const searching = hits !== null;
    for (const L of layout) {
      const y = L.y - top;
      if (y + L.h < AXIS || y > H) continue;
      if (L.type === 'group') {
        ctx.fillStyle = '#eef1f5'; ctx.fillRect(0, y, W, L.h);
        ctx.fillStyle = '#333'; ctx.font = 'bold 11px sans-serif'; ctx.fillText(L.label, 4, y + L.h / 2);
        ctx.font = '11px sans-serif';
        continue;
      }
      if (L.type === 'series') { drawSeries(L.ref, y, t0, k, PW); continue; }
      const r = R[L.ref];
      if (r.kind === 'stall') { ctx.fillStyle = '#fde7e7'; ctx.fillRect(0, y, W, ROW); }
      ctx.fillStyle = r.kind === 'stall' ? STALL : '#222';
      ctx.fillText((r.kind === 'stall' ? '⚠ ' : '') + r.label, 4, y + ROW / 2, LABEL - 52);
      ctx.fillStyle = '#777'; ctx.textAlign = 'right';
      ctx.fillText(pct(r.busy), LABEL - 6, y + ROW / 2);
      ctx.textAlign = 'left';
      const S = r.S, E = r.E, N = r.N, n = S.length;
      // Level of detail: slices that fall in a pixel already covered merge into the covering
      // rectangle, and the scan jumps past them (ends are sorted on a row).
      let i = lowerBound(E, t0), cx0 = -1, cx1 = -1, cc = null;
      while (i < n && S[i] <= t1) {
        const px0 = Math.max(0, Math.floor((S[i] - t0) * k));
        const px1 = Math.min(PW, Math.max(px0 + 1, Math.ceil((E[i] - t0) * k)));
        if (cx1 >= 0 && px0 < cx1) {
          if (px1 > cx1) cx1 = px1;
        } else {
          if (cx1 >= 0) { fillBusy(r, cx0, cx1, cc, y, t0, k); rects++; }
          cx0 = px0; cx1 = px1; cc = searching ? DIM : colour(r, N[i]);
        }
        // Slices ending inside the covered pixels add nothing: skip them.
        i = lowerBound(E, t0 + cx1 / k, i + 1);
      }
      if (cx1 >= 0) { fillBusy(r, cx0, cx1, cc, y, t0, k); rects++; }
      if (searching && r.hits.length) hitRects += drawHits(r, y, t0, t1, k, PW);
      const sel = V.selected;
      if (sel && sel.row === L.ref) {
        const x0 = LABEL + Math.max(-2, (S[sel.index] - t0) * k), x1 = LABEL + Math.min(PW + 2, (E[sel.index] - t0) * k);
        ctx.strokeStyle = '#000'; ctx.lineWidth = 2; ctx.strokeRect(x0 - 1, y + 1, Math.max(2, x1 - x0) + 2, ROW - 2);
      }
      for (const i of r.failed) {
        const m = failedMark(r, i, y, t0, t1, k, PW);
        if (m) {
          failedMarks++;
          ctx.strokeStyle = FAILED; ctx.lineWidth = 2; ctx.strokeRect(m.x0 - 1, y + 1, m.x1 - m.x0 + 2, ROW - 2);
          ctx.fillStyle = FAILED; ctx.beginPath();
          ctx.moveTo(m.xc - 6, y); ctx.lineTo(m.xc + 6, y); ctx.lineTo(m.xc, y + 8); ctx.closePath(); ctx.fill();
        }
      }
    }
    drawAxis(t0, t1, k, PW);
    V.rects = rects; V.hitRects = hitRects; V.failedMarks = failedMarks; V.frames++;
    $('fv-range').textContent = fmt(t0) + ' – ' + fmt(t1) + ' of ' + fmt(D.span) + ' · ' + rects + ' rectangles';
  }
  // Fills pixels [cx0, cx1) of row r in colour c, as opaque as the row is busy there: a pixel
  // holding one short slice among idle time is drawn faint, never solid (the least visible
  // shade is still seen).
  function fillBusy(r, cx0, cx1, c, y, t0, k) {
    const a = t0 + cx0 / k, b = t0 + cx1 / k;
    const f = Math.min(1, busyIn(r, a, b) / Math.max(b - a, 1e-9));
    ctx.globalAlpha = f >= 0.98 ? 1 : Math.max(0.12, f);
    ctx.fillStyle = c;
    ctx.fillRect(LABEL + cx0, y + 2, cx1 - cx0, ROW - 4);
    ctx.globalAlpha = 1;
  }
  // Where the marker of failed slice i of row r goes (null: out of view): a red outline around
  // it and a red triangle over its middle, at least a few pixels wide at any zoom.
  function failedMark(r, i, y, t0, t1, k, PW) {
    if (r.E[i] < t0 || r.S[i] > t1) return null;
    const x0 = LABEL + Math.max(0, (r.S[i] - t0) * k), x1 = Math.max(x0 + 1, LABEL + Math.min(PW, (r.E[i] - t0) * k));
    return { x0, x1, xc: (x0 + x1) / 2, y };
  }
  function drawHits(r, y, t0, t1, k, PW) {
    // The search hits of a row over the dimmed row, in their own colours, merged per pixel.
    const hs = r.hits, S = r.S, E = r.E;
    let n = 0, cx0 = -1, cx1 = -1, cc = null;
    for (let j = lowerBound(r.hitEnds, t0); j < hs.length && S[hs[j]] <= t1; j++) {
      const i = hs[j];
      const px0 = Math.max(0, Math.floor((S[i] - t0) * k));
      const px1 = Math.min(PW, Math.max(px0 + 1, Math.ceil((E[i] - t0) * k)));
      if (cx1 >= 0 && px0 < cx1) { if (px1 > cx1) cx1 = px1; continue; }
      if (cx1 >= 0) { ctx.fillStyle = cc; ctx.fillRect(LABEL + cx0, y + 1, cx1 - cx0, ROW - 2); n++; }
      cx0 = px0; cx1 = px1; cc = colour(r, r.N[i]);
    }
    if (cx1 >= 0) { ctx.fillStyle = cc; ctx.fillRect(LABEL + cx0, y + 1, cx1 - cx0, ROW - 2); n++; }
    return n;
  }
  function drawSeries(s, y, t0, k, PW) {
    ctx.fillStyle = '#222';
    ctx.fillText(s.name, 4, y + 10, LABEL - 8);
    ctx.fillStyle = '#777';
    ctx.fillText('max ' + s.max + (s.unit ? ' ' + s.unit : ''), 4, y + 24, LABEL - 8);
    const t = s.t, v = s.v, h = SERIES - 6, scale = s.max > 0 ? h / s.max : 0, base = y + 3 + h;
    ctx.fillStyle = '#6a9fd4';
    // A step function: per pixel column the highest value it takes there, then the last value
    // held until the next sample's column.
    let i = Math.max(0, lowerBound(t, t0) - 1), px = 0;
    while (px < PW && i < t.length) {
      const tEnd = t0 + (px + 1) / k;
      if (t[i] >= tEnd) { px = Math.max(px + 1, Math.floor((t[i] - t0) * k)); continue; }
      let m = v[i], j = i + 1;
      while (j < t.length && t[j] < tEnd) { if (v[j] > m) m = v[j]; j++; }
      const hold = v[j - 1];
      const nextPx = j < t.length ? Math.min(PW, Math.max(px + 1, Math.floor((t[j] - t0) * k))) : PW;
      if (m > 0) ctx.fillRect(LABEL + px, base - m * scale, 1, m * scale);
      if (hold > 0 && nextPx > px + 1) ctx.fillRect(LABEL + px + 1, base - hold * scale, nextPx - px - 1, hold * scale);
      i = j - 1; px = nextPx;
      if (j >= t.length) break;
    }
  }
  function drawAxis(t0, t1, k, PW) {
    ctx.fillStyle = '#fff'; ctx.fillRect(0, 0, W, AXIS);
    ctx.strokeStyle = '#ccc'; ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(0, AXIS - 0.5); ctx.lineTo(W, AXIS - 0.5); ctx.stroke();
    const raw = (t1 - t0) / Math.max(1, PW / 110), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
    ctx.fillStyle = '#333'; ctx.textBaseline = 'middle';
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
      const x = LABEL + (t - t0) * k;
      ctx.fillRect(x, AXIS - 6, 1, 6);
      ctx.fillText(fmt(t), x + 2, AXIS / 2);
    }
    ctx.fillText('time from run start', 4, AXIS / 2);
  }

  // ---- view changes ----
  function setRange(a, b) {
    const minW = 10;
    let w = Math.max(minW, Math.min(D.span, b - a));
    a = Math.max(0, Math.min(D.span - w, a));
    V.visible = { start: a, end: a + w };
    request();
  }
  function zoom(f, frac) {
    const { start, end } = V.visible, c = start + (end - start) * frac;
    setRange(c - (c - start) * f, c + (end - c) * f);
  }
  function pan(frac) { const { start, end } = V.visible, d = (end - start) * frac; setRange(start + d, end + d); }
  function fracAt(clientX) {
    const b = canvas.getBoundingClientRect();
    return Math.max(0, Math.min(1, (clientX - b.left - LABEL) / (W - LABEL)));
  }

  // ---- search ----
  function search(q) {
    V.query = q;
    q = q.trim().toLowerCase();
    hitOrder = []; hitCursor = -1;
    if (!q) { hits = null; V.searchHits = 0; V.searchSlices = 0; $('fv-hits').textContent = ''; request(); return; }
    // A hex number names exactly one task id (as every command prints ids); any text also
    // finds the kernels whose names contain it. `0x…` is an id only.
    const id = idOf(q);
    const nameHit = D.strings.map((s) => !q.startsWith('0x') && s.toLowerCase().includes(q));
    hits = new Uint8Array(T);
    let tasks = 0;
    for (let i = 0; i < T; i++) {
      const kn = kernel[i] >= 0 && nameHit[kernel[i]];
      if (kn || (id && idHi[i] === id[0] && idLo[i] === id[1])) { hits[i] = 1; tasks++; }
    }
    let slices = 0;
    R.forEach((r, ri) => {
      const list = [];
      for (let i = 0; i < r.N.length; i++) {
        const tk = r.T[i];
        if (tk >= 0 ? hits[tk] : nameHit[r.N[i]]) { list.push(i); hitOrder.push([r.kind === 'core' ? 0 : 1, r.S[i], ri, i]); }
      }
      r.hits = Uint32Array.from(list);
      r.hitEnds = Float64Array.from(list, (i) => r.E[i]);
      slices += list.length;
    });
    // Enter visits the kernel executions first, in time order, then the other rows' hits.
    hitOrder.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    V.searchHits = tasks; V.searchSlices = slices;
    $('fv-hits').textContent = tasks + ' tasks, ' + slices + ' slices';
    request();
  }
  function nextHit() {
    if (!hitOrder.length) return;
    hitCursor = (hitCursor + 1) % hitOrder.length;
    const [, , ri, i] = hitOrder[hitCursor];
    reveal(ri, i);
  }
  function reveal(ri, i) {
    const r = R[ri], d = Math.max(r.E[i] - r.S[i], 50), c = (r.S[i] + r.E[i]) / 2;
    setRange(c - 10 * d, c + 10 * d);
    const y = r.y - scroller.scrollTop;
    if (y < AXIS || y > H - ROW) scroller.scrollTop = Math.max(0, r.y - H / 2);
    select(ri, i);
  }

  // ---- selection ----
  function argsOf(t) {
    const out = [];
    let q = argOff[t];
    const rd = () => { let r = 0, m = 1, b; do { b = argBuf[q++]; r += (b & 127) * m; m *= 128; } while (b & 128); return r; };
    const n = rd();
    for (let a = 0; a < n; a++) {
      const index = rd(), role = D.strings[rd()], dtype = D.strings[rd()], nd = rd(), shape = [];
      for (let k = 0; k < nd; k++) shape.push(rd());
      const st = rd(), v = rd();
      out.push({ index, role, dtype, shape, stage: st ? D.strings[st - 1] : 'graph', value: v ? D.strings[v - 1] : '' });
    }
    return out;
  }
  function select(ri, i) {
    const r = R[ri], t = r.T[i];
    const sel = { row: ri, index: i, rowLabel: r.label, name: D.strings[r.N[i]],
      start: r.S[i], end: r.E[i], task: null, preds: [], succs: [], pmu: {}, args: [] };
    if (t >= 0) {
      sel.task = hex(t); sel.taskIndex = t; sel.blocks = blocks[t];
      sel.kernel = kernel[t] >= 0 ? D.strings[kernel[t]] : 'unknown';
      for (let e = predStart[t]; e < predStart[t + 1]; e++) sel.preds.push(hex(predList[e]));
      for (let e = succStart[t]; e < succStart[t + 1]; e++) sel.succs.push(hex(succList[e]));
      if (pmuHas[t]) { sel.pmuCore = pmuCore[t]; D.pmu.forEach((nm, k) => { sel.pmu[nm] = pmuVals[t * D.pmu.length + k]; }); }
      sel.args = argsOf(t);
    }
    V.selected = sel;
    showDetails(sel);
    request();
  }
  function el(tag, text, cls) { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; }
  function table(head, rows) {
    const tb = el('table'), tr = el('tr');
    head.forEach((h) => tr.appendChild(el('th', h)));
    tb.appendChild(tr);
    rows.forEach((r) => { const x = el('tr'); r.forEach((c) => x.appendChild(el('td', String(c)))); tb.appendChild(x); });
    return tb;
  }
  function taskLinks(list) {
    const d = el('div');
    if (!list.length) d.textContent = 'none';
    list.slice(0, 200).forEach((h) => {
      const b = el('button', h, 'fv-link');
      b.onclick = () => { const ti = taskByHex(h); if (ti >= 0 && firstRow[ti] >= 0) reveal(firstRow[ti], firstIdx[ti]); };
      d.appendChild(b);
    });
    if (list.length > 200) d.appendChild(el('span', ' … ' + (list.length - 200) + ' more'));
    return d;
  }
  function taskByHex(h) {
    const id = idOf(h);
    for (let i = 0; id && i < T; i++) if (idHi[i] === id[0] && idLo[i] === id[1]) return i;
    return -1;
  }
  function showDetails(s) {
    const d = $('fv-details');
    d.replaceChildren();
    d.appendChild(el('h3', s.name + (s.task ? ' · task ' + s.task : '')));
    d.appendChild(el('p', s.rowLabel + ' · ' + fmt(s.start) + ' → ' + fmt(s.end) + ' (' + fmt(s.end - s.start) + ')' +
      (s.task ? ' · kernel ' + s.kernel + ' · ' + s.blocks + ' block(s)' : '')));
    if (!s.task) return;
    d.appendChild(el('h4', 'Arguments'));
    d.appendChild(s.args.length ? table(['arg', 'role', 'dtype', 'shape', 'source', 'value'],
      s.args.map((a) => [a.index, a.role, a.dtype, '[' + a.shape.join(', ') + ']', a.stage, a.value])) : el('p', 'none recorded'));
    d.appendChild(el('h4', 'PMU counters' + (s.pmuCore !== undefined ? ' (core ' + s.pmuCore + ')' : '')));
    const pm = Object.entries(s.pmu);
    d.appendChild(pm.length ? table(['counter', 'value'], pm) : el('p', 'none recorded'));
    d.appendChild(el('h4', 'Predecessors (' + s.preds.length + ')'));
    d.appendChild(taskLinks(s.preds));
    d.appendChild(el('h4', 'Successors (' + s.succs.length + ')'));
    d.appendChild(taskLinks(s.succs));
  }
  function pick(clientX, clientY) {
    const b = canvas.getBoundingClientRect(), x = clientX - b.left - LABEL, y = clientY - b.top + scroller.scrollTop;
    if (x < 0) return;
    const L = layout.find((l) => l.type === 'row' && y >= l.y && y < l.y + l.h);
    if (!L) return;
    const r = R[L.ref], { start, end } = V.visible, k = (W - LABEL) / (end - start);
    const t = start + x / k, tol = 3 / k;
    let i = lowerBound(r.E, t - tol), best = -1, bd = Infinity;
    for (; i < r.S.length && r.S[i] <= t + tol; i++) {
      const d = t < r.S[i] ? r.S[i] - t : t > r.E[i] ? t - r.E[i] : 0;
      if (d < bd) { bd = d; best = i; }
    }
    if (best >= 0) select(L.ref, best);
  }

  // ---- input ----
  function hookInput() {
    canvas.addEventListener('wheel', (e) => {
      e.preventDefault();
      if (e.shiftKey) { pan((e.deltaY || e.deltaX) / 1000); return; }
      zoom(Math.exp(e.deltaY * 0.002), fracAt(e.clientX));
    }, { passive: false });
    let drag = null;
    canvas.addEventListener('mousedown', (e) => {
      drag = { x: e.clientX, y: e.clientY, start: V.visible.start, end: V.visible.end, top: scroller.scrollTop, moved: false };
    });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (!drag.moved) return;
      const w = drag.end - drag.start, d = -dx * w / (W - LABEL);
      setRange(drag.start + d, drag.end + d);
      scroller.scrollTop = drag.top - dy;
    });
    window.addEventListener('mouseup', (e) => {
      if (drag && !drag.moved) pick(e.clientX, e.clientY);
      drag = null;
    });
    scroller.addEventListener('scroll', request);
    window.addEventListener('resize', () => { resize(); request(); });
    const input = $('fv-search');
    input.addEventListener('input', () => search(input.value));
    input.addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); nextHit(); } });
    document.addEventListener('keydown', (e) => {
      if (e.target === input) return;
      const keys = {
        '+': () => zoom(0.5, 0.5), '=': () => zoom(0.5, 0.5), w: () => zoom(0.5, 0.5),
        '-': () => zoom(2, 0.5), s: () => zoom(2, 0.5),
        ArrowLeft: () => pan(-0.2), a: () => pan(-0.2), ArrowRight: () => pan(0.2), d: () => pan(0.2),
        ArrowUp: () => { scroller.scrollTop -= 3 * ROW; }, ArrowDown: () => { scroller.scrollTop += 3 * ROW; },
        '0': () => setRange(0, D.span), Home: () => setRange(0, D.span),
        '/': () => input.focus(), n: nextHit,
        Escape: () => { V.selected = null; $('fv-details').replaceChildren(); request(); },
      };
      const f = keys[e.key];
      if (f) { e.preventDefault(); f(); }
    });
    $('fv-reset').onclick = () => setRange(0, D.span);
    const ft = $('fv-failed-task');
    if (ft && D.failed && D.failed.task >= 0) {
      ft.onclick = () => { const t = D.failed.task; if (firstRow[t] >= 0) reveal(firstRow[t], firstIdx[t]); };
    }
  }

  // The kernels' colours (those on the AICore rows), in the bar.
  function legend() {
    const seen = new Set(), box = $('fv-legend');
    for (const r of R) {
      if (r.kind !== 'core') continue;
      for (let i = 0; i < r.N.length && seen.size < 24; i++) {
        if (seen.has(r.N[i])) continue;
        seen.add(r.N[i]);
        const s = el('span', '■ ', 'fv-key');
        s.style.color = colour(r, r.N[i]);
        box.appendChild(s);
        box.appendChild(document.createTextNode(D.strings[r.N[i]] + '  '));
      }
    }
    if (R.some((r) => r.kind === 'stall')) {
      const s = el('span', '■ ', 'fv-key'); s.style.color = STALL;
      box.appendChild(s); box.appendChild(document.createTextNode('backpressure stall'));
    }
  }

  // Where the selected slice is drawn, relative to the canvas (for scripts that click it).
  V.positionOfSelected = function () {
    const s = V.selected;
    if (!s) return null;
    const r = R[s.row], { start, end } = V.visible, k = (W - LABEL) / (end - start);
    const a = Math.max(start, r.S[s.index]), b = Math.min(end, r.E[s.index]);
    return { x: LABEL + ((a + b) / 2 - start) * k, y: r.y - scroller.scrollTop + ROW / 2 };
  };

  // Where the first failed marker in view is drawn (CSS pixels relative to the canvas: a point
  // inside its triangle), for scripts that sample it; null when none is in view.
  V.positionOfFailed = function () {
    const { start, end } = V.visible, PW = W - LABEL, k = PW / (end - start);
    for (const r of R) {
      const y = r.y - scroller.scrollTop;
      if (y < AXIS || y > H - ROW) continue;
      for (const i of r.failed) {
        const m = failedMark(r, i, y, start, end, k, PW);
        if (m) return { x: m.xc, y: y + 2, row: r.label };
      }
    }
    return null;
  };

  // Where row `label` is drawn (canvas pixels, timeline part only), for scripts that sample it,
  // with its busy fraction over the run (`busy`) and over the visible range (`visibleBusy`),
  // `peak`: the busiest pixel column's busy fraction in the visible range (no pixel of the row
  // may be drawn more opaque than that), and `pixelMean`: the columns' mean busy fraction. The
  // columns tile the visible range, so `pixelMean` equals `visibleBusy` and `peak` is at least
  // that.
  V.rowBand = function (label) {
    const r = R.find((x) => x.label === label);
    if (!r) return null;
    const { start, end } = V.visible, PW = W - LABEL, w = (end - start) / PW;
    let peak = 0, sum = 0;
    for (let px = 0; px < PW; px++) {
      const a = start + px * w, f = busyIn(r, a, a + w) / Math.max(w, 1e-9);
      peak = Math.max(peak, f);
      sum += f;
    }
    const visibleBusy = busyIn(r, start, end) / Math.max(end - start, 1e-9);
    return { x: LABEL * dpr, y: (r.y - scroller.scrollTop + 2) * dpr, w: PW * dpr,
      h: (ROW - 4) * dpr, busy: r.busy, visibleBusy, pixelMean: sum / Math.max(PW, 1),
      peak: Math.min(1, peak) };
  };

  async function main() {
    buf = await inflate(D.data);
    decode();
    buildLayout();
    resize();
    hookInput();
    draw();
    V.firstFrameMs = performance.now();
    V.ready = true;
    legend();
    $('fv-folded').textContent = D.folded.length ? 'Idle rows folded: ' + D.folded.join(', ') : '';
  }
  main().catch((e) => { V.error = String(e && e.stack || e); $('fv-range').textContent = 'error: ' + e; });
})();
