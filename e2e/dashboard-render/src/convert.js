// Grafana dashboard JSON -> Perses DashboardResource, for the panel types
// charts/bulkhead/dashboards/bulkhead.json uses: row, timeseries, heatmap.
//
// convert returns { dashboard, dropped }: dropped lists, once per kind, the
// Grafana features the Perses dashboard does not carry (the report prints it).
// A panel type or a unit it does not know is an error, not a silent default:
// the dashboard would then render something other than what Grafana shows.

// Grafana unit -> Perses FormatOptions.unit (@perses-dev/core 0.52 units).
const UNITS = {
  percentunit: 'percent-decimal',
  percent: 'percent',
  short: 'decimal',
  none: 'decimal',
  reqps: 'requests/sec',
  ops: 'ops/sec',
  s: 'seconds',
  ms: 'milliseconds',
};

// Grafana legend calcs -> Perses legend values.
const CALCS = { lastNotNull: 'last-number', last: 'last', max: 'max', min: 'min', mean: 'mean', sum: 'sum', firstNotNull: 'first-number', first: 'first' };

export const DATASOURCE = 'prometheus';

// convert takes the parsed Grafana dashboard and the Prometheus URL the page
// queries (directUrl) and its scrape interval ($__rate_interval derives from it).
export function convert(grafana, { prometheusUrl, scrapeInterval = '15s' }) {
  const dropped = new Set();
  const drop = (what) => dropped.add(what);

  const panels = {};
  const layouts = [];
  let group = null; // the current row's Grid layout
  const sorted = [...grafana.panels].sort((a, b) => a.gridPos.y - b.gridPos.y || a.gridPos.x - b.gridPos.x);
  for (const p of sorted) {
    if (p.type === 'row') {
      if (p.collapsed) drop('collapsed rows (shown open)');
      group = { kind: 'Grid', spec: { display: { title: p.title, collapse: { open: true } }, items: [] }, rowY: p.gridPos.y + 1 };
      layouts.push(group);
      continue;
    }
    if (!group) {
      group = { kind: 'Grid', spec: { items: [] }, rowY: 0 };
      layouts.push(group);
    }
    const key = `panel_${p.id}`;
    panels[key] = convertPanel(p, drop);
    group.spec.items.push({
      x: p.gridPos.x,
      y: p.gridPos.y - group.rowY,
      width: p.gridPos.w,
      height: p.gridPos.h,
      content: { $ref: `#/spec/panels/${key}` },
    });
  }
  for (const l of layouts) delete l.rowY;

  const variables = [];
  for (const v of grafana.templating?.list ?? []) {
    if (v.type === 'datasource') continue; // one datasource: the Prometheus of the run
    if (v.type !== 'query') throw new Error(`variable ${v.name}: type ${v.type} not converted`);
    variables.push(convertVariable(v, drop));
  }

  if (grafana.annotations?.list?.some((a) => !a.builtIn)) drop('annotations');
  if (grafana.links?.length) drop('dashboard links');
  if (grafana.graphTooltip) drop('shared crosshair/tooltip (graphTooltip)');
  if (grafana.refresh) drop(`auto refresh (${grafana.refresh}): one render`);

  const dashboard = {
    kind: 'Dashboard',
    metadata: { name: grafana.uid ?? 'dashboard', project: 'render' },
    spec: {
      display: { name: grafana.title, description: grafana.description },
      duration: '1h',
      refreshInterval: '0s',
      variables,
      panels,
      layouts,
      datasources: {
        [DATASOURCE]: {
          default: true,
          plugin: { kind: 'PrometheusDatasource', spec: { directUrl: prometheusUrl, scrapeInterval } },
        },
      },
    },
  };
  return { dashboard, dropped: [...dropped] };
}

function convertPanel(p, drop) {
  const defaults = p.fieldConfig?.defaults ?? {};
  const custom = defaults.custom ?? {};
  const opts = p.options ?? {};
  const unit = defaults.unit ?? 'short';
  if (!(unit in UNITS)) throw new Error(`panel ${p.id} "${p.title}": unit ${unit} not converted`);
  const yAxis = { format: { unit: UNITS[unit] } };
  if (defaults.min !== undefined) yAxis.min = defaults.min;
  if (defaults.max !== undefined) yAxis.max = defaults.max;
  if (defaults.decimals !== undefined) yAxis.format.decimalPlaces = defaults.decimals;
  // Grafana draws a time series' thresholds only with custom.thresholdsStyle
  // (off by default); otherwise they colour nothing a line chart shows.
  const tstyle = custom.thresholdsStyle?.mode ?? 'off';
  const steps = (defaults.thresholds?.steps ?? []).filter((s) => s.value !== null && s.value !== undefined);
  const thresholds = tstyle !== 'off' && steps.length ? { steps: steps.map((s) => ({ value: s.value, color: s.color })) } : undefined;
  if (thresholds && tstyle !== 'line' && tstyle !== 'dashed') drop(`thresholds style ${tstyle} (drawn as lines)`);
  if (p.links?.length) drop('panel links');
  if (p.transformations?.length) drop('transformations');

  const spec = { yAxis, visual: { display: 'line', lineWidth: 1.25, areaOpacity: 0, connectNulls: false } };
  if (thresholds) spec.thresholds = thresholds;
  if (p.type === 'timeseries') {
    if (custom.drawStyle && custom.drawStyle !== 'line') spec.visual.display = 'bar';
    if (custom.lineWidth) spec.visual.lineWidth = custom.lineWidth;
    if (custom.fillOpacity !== undefined) spec.visual.areaOpacity = custom.fillOpacity / 100;
    if (custom.spanNulls === true) spec.visual.connectNulls = true;
    if (custom.stacking?.mode && custom.stacking.mode !== 'none') spec.visual.stack = 'all';
    if (custom.showPoints && custom.showPoints !== 'never') drop('showPoints');
    // Grafana's classic palette: colours in series order; Perses' default
    // ('auto') hashes each series' name into a colour instead.
    if (defaults.color?.mode === 'palette-classic') spec.visual.palette = { mode: 'categorical' };
    else if (defaults.color?.mode) drop(`color mode ${defaults.color.mode}`);
    spec.legend = convertLegend(opts.legend, drop);
    if (opts.tooltip?.sort && opts.tooltip.sort !== 'none') drop('tooltip sort order');
    spec.querySettings = convertOverrides(p, drop);
    if (!spec.querySettings.length) delete spec.querySettings;
  } else if (p.type === 'heatmap') {
    // Perses' HeatMapChart (0.3.0) draws one native histogram only ("only native
    // histograms are supported"); this heatmap has one row per series, a float
    // per cell. The same series are drawn as lines, on the same unit and range.
    drop('heatmap panel (one row per series, colour scale): drawn as a time series chart');
    const colour = opts.color ?? {};
    if (colour.min !== undefined) yAxis.min = colour.min;
    if (colour.max !== undefined) yAxis.max = colour.max;
    spec.visual.palette = { mode: 'categorical' };
    spec.legend = { position: 'right', mode: 'list' };
  } else {
    throw new Error(`panel ${p.id} "${p.title}": type ${p.type} not converted`);
  }

  return {
    kind: 'Panel',
    spec: {
      display: { name: p.title, description: p.description },
      plugin: { kind: 'TimeSeriesChart', spec },
      queries: (p.targets ?? []).map((t) => convertTarget(p, t, drop)),
    },
  };
}

function convertLegend(legend, drop) {
  if (legend && legend.showLegend === false) return undefined;
  const out = {
    position: legend?.placement === 'right' ? 'right' : 'bottom',
    mode: legend?.displayMode === 'table' ? 'table' : 'list',
  };
  const values = (legend?.calcs ?? []).map((c) => {
    if (!(c in CALCS)) throw new Error(`legend calc ${c} not converted`);
    return CALCS[c];
  });
  if (values.length) out.values = values;
  // Grafana caps a legend below the chart at 35% of the panel's height and
  // scrolls the rest; Perses' default (medium) table below is 6 rows high
  // whatever the panel's height, which leaves an 8-high panel's chart a
  // strip. Its small table (4 rows) is the nearer match.
  if (out.position === 'bottom' && out.mode === 'table') out.size = 'small';
  if (legend?.sortBy) drop('legend sort');
  return out;
}

// Grafana overrides match series by name; Perses' querySettings apply per
// query. A byRegexp override is carried to the queries whose legendFormat,
// with its {{label}} placeholders as wildcards, the regexp matches.
function convertOverrides(p, drop) {
  const settings = new Map();
  for (const o of p.fieldConfig?.overrides ?? []) {
    if (o.matcher?.id !== 'byRegexp') {
      // byName picks one series of a query (e.g. result="failure"): Perses
      // styles whole queries, not series.
      drop(`overrides by series name (${o.matcher?.id}; e.g. fixed colours per series)`);
      continue;
    }
    const re = new RegExp(`^(?:${o.matcher.options})$`);
    (p.targets ?? []).forEach((t, i) => {
      const sample = (t.legendFormat ?? '').replace(/\{\{\s*\w+\s*\}\}/g, 'x');
      if (!re.test(sample)) return;
      const s = settings.get(i) ?? { queryIndex: i };
      for (const prop of o.properties ?? []) {
        if (prop.id === 'custom.lineStyle') s.lineStyle = prop.value?.fill === 'dot' ? 'dotted' : prop.value?.fill === 'dash' ? 'dashed' : 'solid';
        else if (prop.id === 'custom.fillOpacity') s.areaOpacity = prop.value / 100;
        else if (prop.id === 'color' && prop.value?.fixedColor) Object.assign(s, { colorMode: 'fixed', colorValue: prop.value.fixedColor });
        else drop(`override property ${prop.id}`);
      }
      settings.set(i, s);
    });
  }
  return [...settings.values()];
}

function convertTarget(p, t, drop) {
  if (t.hide) drop('hidden queries');
  if (t.instant) drop('instant queries');
  if (t.interval) drop('per-query min interval');
  return {
    kind: 'TimeSeriesQuery',
    spec: {
      plugin: {
        kind: 'PrometheusTimeSeriesQuery',
        spec: {
          query: t.expr,
          seriesNameFormat: t.legendFormat,
          datasource: { kind: 'PrometheusDatasource', name: DATASOURCE },
        },
      },
    },
  };
}

// label_values(metric{matchers}, label) -> PrometheusLabelValuesVariable.
function convertVariable(v, drop) {
  const q = typeof v.query === 'string' ? v.query : v.query?.query ?? v.definition;
  const m = /^\s*label_values\(\s*(.*?)\s*,\s*(\w+)\s*\)\s*$/.exec(q ?? '');
  if (!m) throw new Error(`variable ${v.name}: query ${q} not converted (label_values only)`);
  if (v.regex) drop('variable regex');
  if (v.sort) drop('variable sort');
  return {
    kind: 'ListVariable',
    spec: {
      name: v.name,
      display: { name: v.label ?? v.name, hidden: v.hide === 2 },
      allowAllValue: !!v.includeAll,
      allowMultiple: !!v.multi,
      ...(v.allValue ? { customAllValue: v.allValue } : {}),
      defaultValue: v.includeAll ? '$__all' : undefined,
      plugin: {
        kind: 'PrometheusLabelValuesVariable',
        spec: { labelName: m[2], matchers: [m[1]], datasource: { kind: 'PrometheusDatasource', name: DATASOURCE } },
      },
    },
  };
}
