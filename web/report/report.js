// itera HTML report (docs/report.md): draws every chart of the embedded data with Chart.js.
// The C++ writer (src/report/html.cpp) decides what each chart shows; this only maps its generic
// spec onto Chart.js. Text from the data reaches the page through textContent or the canvas, never
// as HTML. window.iteraReport tells a test which charts were drawn.
(function () {
  'use strict';
  const status = { drawn: [], empty: [], errors: [], done: false };
  window.iteraReport = status;

  // Tableau 10: distinct on screen and in print.
  const palette = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948', '#b07aa1', '#ff9da7',
    '#9c755f', '#7f7f7f'];
  const color = (i) => palette[((i || 0) % palette.length + palette.length) % palette.length];
  const dashes = { solid: [], dashed: [6, 4], dotted: [2, 3] };
  const pointStyles = ['circle', 'rect', 'triangle', 'rectRot', 'crossRot', 'star'];

  // A long case label on several lines of at most `width` characters, broken at ': ' and spaces.
  function wrap(label, width) {
    if (typeof label !== 'string' || label.length <= width) return label;
    const lines = [];
    for (const part of label.split(': ')) {
      let line = '';
      for (const word of part.split(' ')) {
        if (line && line.length + 1 + word.length > width) {
          lines.push(line);
          line = word;
        } else {
          line = line ? line + ' ' + word : word;
        }
      }
      if (line) lines.push(line);
    }
    return lines;
  }

  // Reference lines (a latency target, 100% of a ceiling) drawn across the plot area.
  const referenceLines = {
    id: 'iteraReferences',
    afterDatasetsDraw(chart, _args, options) {
      const lines = (options && options.lines) || [];
      const { ctx, chartArea: area } = chart;
      for (const line of lines) {
        const scale = chart.scales[line.axis];
        if (!scale) continue;
        const at = scale.getPixelForValue(line.value);
        ctx.save();
        ctx.strokeStyle = line.color || '#c0392b';
        ctx.fillStyle = line.color || '#c0392b';
        ctx.lineWidth = 1.5;
        ctx.setLineDash([7, 4]);
        ctx.beginPath();
        if (scale.isHorizontal()) {
          ctx.moveTo(at, area.top);
          ctx.lineTo(at, area.bottom);
        } else {
          ctx.moveTo(area.left, at);
          ctx.lineTo(area.right, at);
        }
        ctx.stroke();
        ctx.setLineDash([]);
        ctx.font = '12px system-ui, sans-serif';
        if (scale.isHorizontal()) {
          ctx.textAlign = 'right';
          ctx.fillText(line.label, at - 4, area.top + 12);
        } else {
          ctx.textAlign = 'right';
          ctx.fillText(line.label, area.right - 4, at - 4);
        }
        ctx.restore();
      }
    },
  };

  // A projected value (the cost chart): the series colour, lighter, under diagonal lines, so it reads
  // apart from a measured bar on screen and in print.
  function hatch(c) {
    const tile = document.createElement('canvas');
    tile.width = 8;
    tile.height = 8;
    const ctx = tile.getContext('2d');
    ctx.fillStyle = c + '55';
    ctx.fillRect(0, 0, 8, 8);
    ctx.strokeStyle = c;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(-2, 10);
    ctx.lineTo(10, -2);
    ctx.moveTo(-2, 2);
    ctx.lineTo(2, -2);
    ctx.moveTo(6, 10);
    ctx.lineTo(10, 6);
    ctx.stroke();
    return ctx.createPattern(tile, 'repeat');
  }

  function scaleType(scale) {
    if (scale === 'log') return 'logarithmic';
    if (scale === 'category') return 'category';
    return 'linear';
  }

  function dataset(spec, series, index) {
    const c = color(series.color !== undefined ? series.color : index);
    const out = { label: series.label, borderColor: c, backgroundColor: c };
    if (spec.kind === 'line') {
      out.data = series.points.map(([x, y]) => ({ x, y }));
      out.borderDash = dashes[series.dash || 'solid'] || [];
      out.pointRadius = 4;
      out.pointStyle = pointStyles[index % pointStyles.length];
      out.borderWidth = 2;
      out.tension = 0;
      out.fill = false;
      return out;
    }
    out.data = series.values;
    if (series.kind === 'marker') {
      // A value drawn as a mark over the bars (the measured memory peak), stacked apart from them.
      out.type = 'line';
      out.showLine = false;
      out.pointStyle = 'rectRot';
      out.pointRadius = 7;
      out.pointHoverRadius = 8;
      out.borderColor = '#111';
      out.backgroundColor = '#111';
      out.stack = 'marker-' + index;
      out.order = -1;
      return out;
    }
    out.borderWidth = 0;
    if (series.pattern === 'hatched') {
      out.backgroundColor = hatch(c);
      out.borderWidth = 1.5;
    }
    out.skipNull = true;
    if (series.stack) out.stack = series.stack;
    return out;
  }

  function config(spec) {
    const horizontal = spec.kind === 'hbar';
    const valueAxis = horizontal ? 'x' : 'y';
    const indexAxis = horizontal ? 'y' : 'x';
    const scales = {};
    const indexLabel = horizontal ? spec.y.label : spec.x.label;
    scales[indexAxis] = {
      type: spec.kind === 'line' ? scaleType(spec.x.scale) : 'category',
      // Case labels name themselves; an axis title beside them only takes room.
      title: { display: spec.kind === 'line', text: indexLabel },
      stacked: !!spec.stacked,
    };
    if (spec.kind !== 'line') scales[indexAxis].ticks = { autoSkip: false };
    scales[valueAxis] = {
      type: scaleType(horizontal ? spec.x.scale : spec.y.scale),
      title: { display: true, text: horizontal ? spec.x.label : spec.y.label },
      stacked: !!spec.stacked,
      beginAtZero: (horizontal ? spec.x.scale : spec.y.scale) !== 'log',
    };
    if (spec.kind === 'line' && spec.x.scale === 'log') {
      // Ticks at the measured x values only (batch 1, 8, 64), not at every power of ten.
      const xs = [...new Set(spec.series.flatMap((s) => s.points.map((p) => p[0])))];
      scales.x.afterBuildTicks = (axis) => { axis.ticks = xs.map((value) => ({ value })); };
      scales.x.ticks = { callback: (value) => String(value) };
    }
    const references = (spec.references || []).map((r) => ({ ...r, axis: r.axis === 'value' ? valueAxis : r.axis }));
    for (const r of references) {
      const s = scales[r.axis];
      if (!s) continue;
      s.suggestedMax = Math.max(s.suggestedMax === undefined ? -Infinity : s.suggestedMax, r.value * 1.08);
    }
    return {
      type: spec.kind === 'line' ? 'line' : 'bar',
      data: {
        labels: spec.kind === 'line' ? undefined : spec.categories.map((c) => wrap(c, horizontal ? 56 : 22)),
        datasets: spec.series.map((s, i) => dataset(spec, s, i)),
      },
      options: {
        indexAxis,
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        interaction: { mode: 'nearest', intersect: false },
        scales,
        plugins: {
          legend: { position: 'bottom', labels: { boxWidth: 14 } },
          iteraReferences: { lines: references },
        },
      },
      plugins: [referenceLines],
    };
  }

  try {
    const data = JSON.parse(document.getElementById('itera-report-data').textContent);
    for (const spec of data.charts) {
      if (!spec.series || spec.series.length === 0) {
        status.empty.push(spec.id);
        continue;
      }
      try {
        const canvas = document.getElementById('chart-' + spec.id);
        if (!canvas) throw new Error('no canvas for chart ' + spec.id);
        new Chart(canvas, config(spec)); // eslint-disable-line no-new
        status.drawn.push(spec.id);
      } catch (e) {
        status.errors.push(spec.id + ': ' + e.message);
        console.error('itera report: chart ' + spec.id + ' could not be drawn: ' + e.message);
      }
    }
  } catch (e) {
    status.errors.push(e.message);
    console.error('itera report: ' + e.message);
  }
  status.done = true;
})();
