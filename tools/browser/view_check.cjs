// Drives headless Chromium over a `ferry view` page and prints what it observed as JSON.
//
//   node view_check.cjs PAGE.html [--search TEXT] [--queries A,B,...] [--rounds N] [--failed]
//
// Loads the page (file://, no network), waits for window.ferryView.ready and then, through real
// input events: zooms with the wheel, pans by dragging, zooms and pans with keys, searches by
// typing into the search box, goes to the first hit (Enter) and clicks on it. After each step it
// records the page's own state (visible range, rectangles drawn, search hits, selection) and a
// digest of the canvas pixels. With --rounds N it only loads the page N times (a fresh tab each)
// and reports the first-frame times. With --queries it also types each query in turn and records
// the tasks it finds and the task Enter selects. With --failed (a failed run's page) it also
// clicks the bar's failed-task button and records what that selected and drew. Chromium: $FERRY_CHROMIUM or /usr/bin/chromium.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { chromium } = require('playwright-core');

const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

function parseArgs(argv) {
  const a = { page: null, search: null, rounds: 0, queries: [], failed: false };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--search') a.search = argv[++i];
    else if (argv[i] === '--queries') a.queries = argv[++i].split(',');
    else if (argv[i] === '--rounds') a.rounds = Number(argv[++i]);
    else if (argv[i] === '--failed') a.failed = true;
    else a.page = argv[i];
  }
  if (!a.page) throw new Error('usage: view_check.cjs PAGE.html [--search TEXT] [--rounds N]');
  return a;
}

async function load(ctx, url) {
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  // Any request that is not the file itself would be network: record it.
  const requests = [];
  page.on('request', (r) => { if (r.url() !== url) requests.push(r.url()); });
  const t = Date.now();
  await page.goto(url, { waitUntil: 'load', timeout: 180000 });
  await page.waitForFunction(() => window.ferryView && (window.ferryView.ready || window.ferryView.error),
    null, { timeout: 180000, polling: 50 });
  const wallMs = Date.now() - t;
  return { page, errors, requests, wallMs };
}

// Waits for the next animation frame to be drawn, then returns the page state and a pixel digest.
async function state(page) {
  return page.evaluate(() => new Promise((res) => requestAnimationFrame(() => requestAnimationFrame(() => {
    const v = window.ferryView, c = document.getElementById('fv-canvas');
    const g = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let h = 2166136261 >>> 0, ink = 0;
    for (let i = 0; i < g.length; i += 4) {
      const x = g[i] | (g[i + 1] << 8) | (g[i + 2] << 16);
      if (g[i + 3] && x !== 0xffffff) ink++;
      h = Math.imul(h ^ x, 16777619) >>> 0;
    }
    // The least busy row that ran anything: how dark its darkest timeline pixel is, as shown
    // over the page's white (255 minus its smallest channel after compositing its alpha; a
    // palette colour drawn solid is at least 137, white is 0).
    let leastBusy = null;
    if (v.busy && v.rowBand) {
      // The AICore row whose busiest visible pixel is the least busy: its pixels must be drawn
      // faint, each no more opaque than its busy fraction (a stall row's one long wait is
      // rightly solid, and so is a burst that fills a pixel).
      let best = -1, bestPeak = 2;
      v.busy.forEach((b, i) => {
        if (b <= 0 || (v.kinds && v.kinds[i] !== 'core')) return;
        const band = v.rowBand(v.rows[i]);
        if (band && band.y >= 0 && band.y + band.h <= c.height && band.peak < bestPeak) {
          best = i; bestPeak = band.peak;
        }
      });
      const band = best >= 0 && v.rowBand(v.rows[best]);
      if (band) {
        const px = c.getContext('2d').getImageData(band.x, band.y, band.w, band.h).data;
        let maxInk = 0;
        for (let i = 0; i < px.length; i += 4) {
          const ink = Math.round((255 - Math.min(px[i], px[i + 1], px[i + 2])) * px[i + 3] / 255);
          if (ink > maxInk) maxInk = ink;
        }
        leastBusy = { row: v.rows[best], busy: band.busy, visibleBusy: band.visibleBusy, pixelMean: band.pixelMean, peak: band.peak, maxInk };
      }
    }
    // The failed task's marker: the colour drawn where the page says its first marker in view is.
    let failedPixel = null;
    const fp = v.positionOfFailed && v.positionOfFailed();
    if (fp) {
      const r = window.devicePixelRatio || 1;
      const d = c.getContext('2d').getImageData(Math.round(fp.x * r), Math.round(fp.y * r), 1, 1).data;
      failedPixel = { row: fp.row, rgb: [d[0], d[1], d[2]] };
    }
    res({ visible: v.visible, failedMarks: v.failedMarks, failedPixel, span: v.span, rects: v.rects, hitRects: v.hitRects, frames: v.frames, leastBusy,
      searchHits: v.searchHits, searchSlices: v.searchSlices, query: v.query,
      selected: v.selected && { task: v.selected.task, name: v.selected.name, row: v.selected.rowLabel,
        args: v.selected.args, pmu: v.selected.pmu, preds: v.selected.preds, succs: v.selected.succs },
      pixels: { digest: h, ink } });
  }))));
}

async function main() {
  const a = parseArgs(process.argv.slice(2));
  const file = path.resolve(a.page);
  const url = 'file://' + file;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ferry-chromium-'));
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: process.env.FERRY_CHROMIUM || '/usr/bin/chromium',
    headless: true, args: FLAGS, viewport: { width: 1400, height: 900 },
  });
  const out = { page: file, bytes: fs.statSync(file).size, browser: ctx.browser() ? ctx.browser().version() : null };
  try {
    if (a.rounds > 0) {
      out.rounds = [];
      for (let r = 0; r < a.rounds; r++) {
        const l = await load(ctx, url);
        const ff = await l.page.evaluate(() => window.ferryView.firstFrameMs);
        out.rounds.push({ firstFrameMs: ff, wallMs: l.wallMs, errors: l.errors });
        await l.page.close();
      }
      return;
    }
    const l = await load(ctx, url);
    const page = l.page;
    out.errors = l.errors;
    out.requests = l.requests;
    out.wallMs = l.wallMs;
    const info = await page.evaluate(() => {
      const v = window.ferryView;
      const rep = document.getElementById('fv-report');
      const ft = document.getElementById('fv-failed-task');
      return { firstFrameMs: v.firstFrameMs, error: v.error, rows: v.rows, folded: v.folded,
        failed: v.failed, failedBar: ft ? ft.textContent : null,
        series: v.series, tasks: v.tasks, slices: v.slices, busy: v.busy,
        report: rep ? rep.textContent : null };
    });
    Object.assign(out, info);
    if (info.error) return;
    const box = await page.locator('#fv-canvas').boundingBox();
    const cx = box.x + box.width * 0.6, cy = box.y + Math.min(box.height / 2, 60);
    out.initial = await state(page);
    if (a.failed) {
      await page.locator('#fv-failed-task').click();
      out.failedClick = await state(page);
      await page.keyboard.press('0');
    }
    await page.mouse.move(cx, cy);
    await page.mouse.wheel(0, -600);
    out.wheelZoom = await state(page);
    await page.mouse.move(cx, cy);
    await page.mouse.down();
    await page.mouse.move(cx - 150, cy, { steps: 5 });
    await page.mouse.move(cx - 300, cy, { steps: 5 });
    await page.mouse.up();
    out.dragPan = await state(page);
    await page.keyboard.press('Minus');
    out.keyZoomOut = await state(page);
    await page.keyboard.press('ArrowRight');
    out.keyPan = await state(page);
    await page.keyboard.press('0');
    out.reset = await state(page);
    if (a.search) {
      await page.locator('#fv-search').fill(a.search);
      out.search = await state(page);
      await page.locator('#fv-search').press('Enter');
      out.firstHit = await state(page);
      // Click on the selected task where the page draws it.
      const at = await page.evaluate(() => window.ferryView.positionOfSelected());
      await page.locator('#fv-search').blur();
      await page.keyboard.press('Escape');
      out.cleared = await state(page);
      await page.locator('#fv-canvas').click({ position: { x: at.x, y: at.y } });
      out.click = await state(page);
      out.click.details = await page.locator('#fv-details').innerText();
      await page.locator('#fv-search').fill('');
      out.searchCleared = await state(page);
    }
    out.queries = [];
    for (const q of a.queries) {
      await page.locator('#fv-search').fill(q);
      const found = await state(page);
      await page.locator('#fv-search').press('Enter');
      const hit = await state(page);
      out.queries.push({ query: q, searchHits: found.searchHits, selected: hit.selected && hit.selected.task });
      await page.locator('#fv-search').fill('');
    }
  } finally {
    await ctx.close();
    fs.rmSync(dir, { recursive: true, force: true });
    process.stdout.write(JSON.stringify(out) + '\n');
  }
}

main().catch((e) => { console.error(e && e.stack || String(e)); process.exit(1); });
