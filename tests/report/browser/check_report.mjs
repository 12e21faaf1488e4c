// Opens an itera HTML report from disk in Debian's chromium (offline: any request other than the
// file itself fails the test) and checks that it renders with no console error, that every chart
// with data is drawn on its canvas with that data, and that every chart without data says so.
// Usage: node check_report.mjs REPORT.html SCREENSHOT.png PROFILE_DIR [EXPECTED_CHART_ID...]
// An expected id written +ID must also have data (be drawn). A series with pattern "hatched" (the
// cost chart's projected bars) must be filled with a pattern, unlike the measured ones.
import { chromium } from 'playwright-core';
import { mkdtempSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import assert from 'node:assert/strict';

const [report, screenshot, profileRoot, ...expected] = process.argv.slice(2);
const url = pathToFileURL(resolve(report)).href;
const args = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

const context = await chromium.launchPersistentContext(mkdtempSync(join(profileRoot, 'report-')), {
  executablePath: '/usr/bin/chromium', headless: true, args, viewport: { width: 1280, height: 900 },
});
const problems = [];
try {
  const page = context.pages()[0] ?? await context.newPage();
  page.setDefaultTimeout(15000);
  page.on('console', (m) => { if (m.type() === 'error' || m.type() === 'warning') problems.push(`console ${m.type()}: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('request', (r) => { if (r.url() !== url && !r.url().startsWith('data:')) problems.push(`request to ${r.url()}`); });
  await page.goto(url, { waitUntil: 'load' });
  await page.waitForFunction(() => window.iteraReport && window.iteraReport.done);

  const result = await page.evaluate(() => {
    const data = JSON.parse(document.getElementById('itera-report-data').textContent);
    const charts = [];
    for (const spec of data.charts) {
      const figure = document.getElementById('figure-' + spec.id);
      const entry = { id: spec.id, title: spec.title, hasData: spec.series.length > 0, figure: !!figure };
      if (entry.hasData) {
        const canvas = document.getElementById('chart-' + spec.id);
        const chart = canvas && Chart.getChart(canvas);
        entry.canvas = !!canvas;
        entry.chart = !!chart;
        if (chart) {
          entry.width = canvas.width;
          entry.height = canvas.height;
          // The data Chart.js holds must be the embedded data, point for point.
          entry.datasets = chart.data.datasets.map((d, i) => {
            const want = spec.series[i];
            const got = d.data.map((v) => (v !== null && typeof v === 'object' ? [v.x, v.y] : v));
            const expect = want.points ?? want.values;
            const filled = d.backgroundColor instanceof CanvasPattern;
            return { label: d.label, values: got.filter((v) => v !== null).length,
              same: JSON.stringify(got) === JSON.stringify(expect), visible: chart.isDatasetVisible(i),
              patternOk: want.pattern === 'hatched' ? filled : !filled };
          });
          const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
          let painted = 0;
          for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
          entry.painted = painted;
          entry.paintedShare = painted / (canvas.width * canvas.height);
        }
      } else {
        const note = figure && figure.querySelector('p.no-data');
        entry.note = note ? note.textContent : null;
        entry.noteVisible = !!note && note.getBoundingClientRect().height > 0;
      }
      charts.push(entry);
    }
    return { charts, status: window.iteraReport, scripts: [...document.querySelectorAll('script[src], link[href]')].length };
  });

  assert.deepEqual(result.status.errors, [], 'the page reported chart errors');
  assert.equal(result.scripts, 0, 'the page references external scripts or stylesheets');
  const ids = result.charts.map((c) => c.id);
  for (const want of expected) {
    const id = want.replace(/^\+/, '');
    assert.ok(ids.includes(id), `chart ${id} is missing (have: ${ids.join(', ')})`);
    if (want.startsWith('+')) assert.ok(result.charts.find((c) => c.id === id).hasData, `chart ${id} has no data`);
  }
  for (const c of result.charts) {
    assert.ok(c.figure, `chart ${c.id}: no figure on the page`);
    if (c.hasData) {
      assert.ok(c.canvas && c.chart, `chart ${c.id}: no Chart.js chart on its canvas`);
      assert.ok(result.status.drawn.includes(c.id), `chart ${c.id}: not drawn`);
      assert.ok(c.width > 100 && c.height > 100, `chart ${c.id}: canvas ${c.width}x${c.height}`);
      assert.ok(c.datasets.length > 0, `chart ${c.id}: no dataset`);
      for (const d of c.datasets) {
        assert.ok(d.values > 0, `chart ${c.id}, series "${d.label}": no value`);
        assert.ok(d.same, `chart ${c.id}, series "${d.label}": Chart.js holds other data than the embedded data`);
        assert.ok(d.visible, `chart ${c.id}, series "${d.label}": hidden`);
        assert.ok(d.patternOk, `chart ${c.id}, series "${d.label}": hatched fill does not match the spec`);
      }
      assert.ok(c.paintedShare > 0.01, `chart ${c.id}: canvas almost blank (${c.painted} pixels painted)`);
    } else {
      assert.ok(c.noteVisible && /No data for this chart/.test(c.note), `chart ${c.id}: no data and no visible note`);
    }
  }
  await page.screenshot({ path: screenshot, fullPage: true });
  const drawn = result.charts.filter((c) => c.hasData).length;
  console.log(`${report}: ${drawn} charts drawn, ${result.charts.length - drawn} with a no-data note, screenshot ${screenshot}`);
} finally {
  await context.close();
}
if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
