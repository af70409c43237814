#!/usr/bin/env node
// Renders a Grafana dashboard with Perses (the @perses-dev npm packages) in
// headless Chromium against a live Prometheus, writes a full-page PNG, and
// exits 1 if a panel shows an error or no data.
//
//   node render.mjs --prometheus http://127.0.0.1:9090 [--dashboard FILE] [--out FILE]
//                   [--start MS --end MS] [--scrape-interval 1s] [--chromium PATH] [--timeout 120]
//                   [--panels DIR]   (also one PNG per panel into DIR, to look at each)
//                   [--allow-empty 'TITLE: why']...  (a panel expected empty on this stack: reported, not failed)
//
// The Grafana JSON is converted first (src/convert.js; what does not carry
// over is printed). The page (src/page.jsx) is bundled with esbuild into
// build/ and served on 127.0.0.1 with Prometheus behind /prometheus, so the
// browser queries one origin. make dashboard-render runs it from
// e2e/dashboard_render_test.go, which starts the daemon, Envoy, Prometheus
// and the load.
import { build } from 'esbuild';
import { readFile, mkdir } from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import puppeteer from 'puppeteer-core';
import { convert } from './src/convert.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: args } = parseArgs({
  options: {
    prometheus: { type: 'string' },
    dashboard: { type: 'string', default: path.join(here, '../../charts/bulkhead/dashboards/bulkhead.json') },
    out: { type: 'string', default: 'dashboard.png' },
    start: { type: 'string' },
    end: { type: 'string' },
    'scrape-interval': { type: 'string', default: '1s' },
    chromium: { type: 'string', default: process.env.CHROMIUM_BIN || '/usr/bin/chromium' },
    timeout: { type: 'string', default: '120' },
    width: { type: 'string', default: '1600' },
    panels: { type: 'string' },
    'allow-empty': { type: 'string', multiple: true, default: [] },
  },
});
if (!args.prometheus) {
  console.error('render: --prometheus URL is required');
  process.exit(2);
}
const deadline = Date.now() + Number(args.timeout) * 1000;
const end = Number(args.end ?? Date.now());
const start = Number(args.start ?? end - 15 * 60 * 1000);

const grafana = JSON.parse(await readFile(args.dashboard, 'utf8'));
const server = http.createServer();
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const origin = `http://127.0.0.1:${server.address().port}`;
const { dashboard, dropped } = convert(grafana, { prometheusUrl: `${origin}/prometheus`, scrapeInterval: args['scrape-interval'] });
const panelCount = Object.keys(dashboard.spec.panels).length;
console.log(`render: ${grafana.title}: ${panelCount} panels in ${dashboard.spec.layouts.length} groups`);
for (const d of dropped) console.log(`render: not carried over: ${d}`);

const outdir = path.join(here, 'build');
await mkdir(outdir, { recursive: true });
const t0 = Date.now();
await build({
  entryPoints: [path.join(here, 'src/page.jsx')],
  bundle: true,
  outdir,
  entryNames: 'page',
  format: 'iife',
  jsx: 'automatic',
  // Set explicitly, esbuild takes each package's ESM build even where some
  // file require()s it (plugin-system's module-federation runtime does):
  // with its default it would bundle the CommonJS build beside the ESM one,
  // and two copies of react-query's context ("No QueryClient set").
  mainFields: ['browser', 'module', 'main'],
  loader: { '.js': 'jsx', '.woff': 'file', '.woff2': 'file', '.ttf': 'file', '.svg': 'file' },
  // Some dependencies expect Node's global, which webpack (Perses' own build) provides.
  define: { 'process.env.NODE_ENV': '"production"', global: 'globalThis' },
  minify: true,
  logLevel: 'warning',
});
console.log(`render: page bundled in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

const index = `<!doctype html><html><head><meta charset="utf-8"><title>${grafana.title}</title>
<link rel="stylesheet" href="/page.css"></head><body><div id="root"></div>
<script>window.__DASHBOARD__ = ${JSON.stringify(dashboard).replace(/</g, '\\u003c')};</script>
<script src="/page.js"></script></body></html>`;
const types = { '.js': 'text/javascript', '.css': 'text/css', '.woff': 'font/woff', '.woff2': 'font/woff2', '.svg': 'image/svg+xml', '.ttf': 'font/ttf' };
const prom = new URL(args.prometheus);
server.on('request', async (req, res) => {
  const url = new URL(req.url, origin);
  if (url.pathname.startsWith('/prometheus/')) {
    const upstream = http.request(
      { host: prom.hostname, port: prom.port, method: req.method, path: url.pathname.slice('/prometheus'.length) + url.search, headers: { ...req.headers, host: prom.host } },
      (up) => {
        res.writeHead(up.statusCode, up.headers);
        up.pipe(res);
      },
    );
    upstream.on('error', (err) => {
      res.writeHead(502);
      res.end(String(err));
    });
    req.pipe(upstream);
    return;
  }
  if (url.pathname === '/favicon.ico') {
    res.writeHead(204);
    res.end();
    return;
  }
  const file = path.join(outdir, path.normalize(url.pathname));
  if (url.pathname === '/' || !file.startsWith(outdir + path.sep)) {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(index);
    return;
  }
  try {
    const body = await readFile(file);
    res.writeHead(200, { 'content-type': types[path.extname(file)] ?? 'application/octet-stream' });
    res.end(body);
  } catch {
    res.writeHead(404);
    res.end();
  }
});

const browser = await puppeteer.launch({
  executablePath: args.chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--hide-scrollbars'],
});
let failed = false;
try {
  const page = await browser.newPage();
  const width = Number(args.width);
  await page.setViewport({ width, height: 1200 });
  const consoleErrors = [];
  page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(`${origin}/?start=${start}&end=${end}`, { waitUntil: 'load' });
  // Perses renders a panel only once it is in view: make the whole dashboard
  // the viewport, as it grows.
  for (let height = 0; ; ) {
    const h = await page.evaluate(() => document.documentElement.scrollHeight);
    if (h !== height) await page.setViewport({ width, height: (height = h) });
    const n = await page.evaluate(() => document.querySelectorAll('[data-testid="panel"]').length);
    if (n >= panelCount || Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  const panels = await settle(page);
  const allowEmpty = new Map(args['allow-empty'].map((a) => [a.split(':')[0].trim(), a.slice(a.indexOf(':') + 1).trim()]));
  for (const p of panels) {
    let problem = p.error ? `error: ${p.error}` : p.series === 0 ? 'no data' : '';
    let verdict = problem ? 'FAIL' : 'ok  ';
    if (problem === 'no data' && allowEmpty.has(p.title)) {
      verdict = 'empty';
      problem = `no data, allowed: ${allowEmpty.get(p.title)}`;
      allowEmpty.delete(p.title);
    } else if (problem) {
      failed = true;
    }
    console.log(`render: ${verdict} ${p.title}: ${p.series} series${p.legend.length ? `, legend: ${p.legend.slice(0, 6).join(' | ')}${p.legend.length > 6 ? ' | ...' : ''}` : ''}${problem ? ` (${problem})` : ''}`);
  }
  for (const title of allowEmpty.keys()) {
    failed = true; // an allowance that no longer applies is stale
    console.log(`render: FAIL --allow-empty ${title}: no such panel, or it has data now`);
  }
  if (panels.length !== panelCount) {
    failed = true;
    console.log(`render: FAIL ${panels.length} panels on the page, ${panelCount} in the dashboard`);
  }
  for (const e of consoleErrors.slice(0, 20)) console.log(`render: browser console: ${e.slice(0, 300)}`);
  // The viewport already holds the whole dashboard: fullPage would resize
  // it once more, and the grid lays its panels out again mid-capture.
  await page.screenshot({ path: args.out, captureBeyondViewport: false });
  if (args.panels) {
    await mkdir(args.panels, { recursive: true });
    // Clipped from the page as it is: an element screenshot would scroll
    // and resize, and the panels would draw again.
    const boxes = await page.evaluate(() =>
      [...document.querySelectorAll('[data-testid="panel"]')].map((el) => {
        const r = el.getBoundingClientRect();
        return { x: r.x + window.scrollX, y: r.y + window.scrollY, width: r.width, height: r.height };
      }),
    );
    for (const [i, clip] of boxes.entries()) {
      const name = `${String(i + 1).padStart(2, '0')}-${(panels[i]?.title ?? 'panel').replace(/[^A-Za-z0-9]+/g, '-').replace(/^-|-$/g, '').slice(0, 60)}.png`;
      await page.screenshot({ path: path.join(args.panels, name), clip, captureBeyondViewport: false });
    }
    console.log(`render: wrote ${boxes.length} panel images into ${args.panels}`);
  }
  console.log(`render: wrote ${args.out} (${width}x${await page.evaluate(() => document.documentElement.scrollHeight)})`);
} finally {
  await browser.close();
  server.close();
}
process.exit(failed ? 1 : 0);

// settle waits until no panel is loading and the panels' state has not
// changed for two seconds, then returns it.
async function settle(page) {
  let last = '';
  let stableSince = Date.now();
  for (;;) {
    const panels = await page.evaluate(inspectPanels);
    const state = JSON.stringify(panels);
    const loading = panels.some((p) => p.loading);
    if (state !== last || loading) {
      last = state;
      stableSince = Date.now();
    } else if (Date.now() - stableSince > 2000) {
      return panels;
    }
    if (Date.now() > deadline) {
      console.log('render: panels did not settle before the timeout; reporting their last state');
      return panels;
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

// inspectPanels runs in the page: per panel its title, an error shown in it,
// the number of chart series with at least one value (read from the ECharts
// instance the page exposes), the legend entries, whether it still loads.
function inspectPanels() {
  return [...document.querySelectorAll('[data-testid="panel"]')].map((el) => {
    const title = el.querySelector('h2, h6, [id$="-header"] *')?.textContent?.trim() ?? '?';
    const alert = el.querySelector('.MuiAlert-standardError, [role="alert"]');
    const headerError = el.querySelector('[aria-label="panel errors"]');
    const loading = !!el.querySelector('[aria-label="loading"], [aria-label="Loading..."]');
    // Perses' time series chart keeps each series' points in a dataset the
    // series names by index; its threshold lines are series too, named
    // "Threshold N", and are not data.
    let series = 0;
    for (const c of el.querySelectorAll('[_echarts_instance_]')) {
      const option = window.__echarts?.getInstanceByDom(c)?.getOption() ?? {};
      const datasets = option.dataset ?? [];
      for (const s of option.series ?? []) {
        if (/^Threshold \d+$/.test(s.name ?? '') || /^Threshold/.test(String(s.datasetId ?? ''))) continue;
        const rows = s.data ?? datasets[s.datasetIndex ?? 0]?.source ?? [];
        const value = (d) => (Array.isArray(d) ? d[1] : d !== null && typeof d === 'object' ? (Array.isArray(d.value) ? d.value[1] : d.value) : d);
        if (rows.some((d) => {
          const v = value(d);
          return v !== null && v !== undefined && v !== '-' && Number.isFinite(Number(v));
        })) series++;
      }
    }
    // List legends are role=listitem; table legends are a virtualised
    // table, whose rows outside its scroll box are not in the page.
    const legend = [...el.querySelectorAll('[role="listitem"], table tbody tr')]
      .map((li) => li.textContent.trim().replace(/\s+/g, ' '))
      .filter(Boolean);
    return {
      title,
      loading,
      error: alert ? alert.textContent.trim().slice(0, 200) : headerError ? 'query error (header icon)' : '',
      series,
      legend,
    };
  });
}
