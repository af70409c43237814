// The page Chromium loads: Perses' own ViewDashboard (@perses-dev/dashboards)
// with the Prometheus datasource, query and variable plugins and the time
// series chart plugin, on the dashboard render.mjs converted. The providers
// are those Perses' own test harness puts around a dashboard
// (@perses-dev/dashboards/dist/test/render.js), with the real plugins.
import React, { useMemo } from 'react';
import { createRoot } from 'react-dom/client';
import { BrowserRouter } from 'react-router-dom';
import { QueryParamProvider } from 'use-query-params';
import { ReactRouter6Adapter } from 'use-query-params/adapters/react-router-6';
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { ThemeProvider, CssBaseline } from '@mui/material';
import { ChartsProvider, SnackbarProvider, generateChartsTheme, getTheme } from '@perses-dev/components';
import { PluginRegistry, dynamicImportPluginLoader } from '@perses-dev/plugin-system';
import { ViewDashboard } from '@perses-dev/dashboards';
import * as prometheusPlugin from '@perses-dev/prometheus-plugin';
import * as timeSeriesPlugin from '@perses-dev/timeseries-chart-plugin';
import * as echarts from 'echarts/core';

// render.mjs reads each panel's chart (its series, their values) from here.
window.__echarts = echarts;

// The plugin modules are bundled; the loader hands them over as a dynamic
// import would (Perses' app loads them by module federation instead).
const pluginLoader = dynamicImportPluginLoader([
  { resource: prometheusPlugin.getPluginModule(), importPlugin: () => Promise.resolve(prometheusPlugin) },
  { resource: timeSeriesPlugin.getPluginModule(), importPlugin: () => Promise.resolve(timeSeriesPlugin) },
]);

const dashboard = window.__DASHBOARD__;

// The dashboard's own datasources are the only ones: nothing to list beyond them.
const datasourceApi = {
  getDatasource: async () => undefined,
  getGlobalDatasource: async () => undefined,
  listDatasources: async () => [],
  listGlobalDatasources: async () => [],
};

const queryClient = new QueryClient({ defaultOptions: { queries: { refetchOnWindowFocus: false, retry: false } } });

function App() {
  const muiTheme = useMemo(() => getTheme('light'), []);
  const chartsTheme = useMemo(() => generateChartsTheme(muiTheme, {}), [muiTheme]);
  return (
    <BrowserRouter>
      <QueryParamProvider adapter={ReactRouter6Adapter}>
        <QueryClientProvider client={queryClient}>
          <ThemeProvider theme={muiTheme}>
            <CssBaseline />
            <SnackbarProvider anchorOrigin={{ vertical: 'bottom', horizontal: 'right' }}>
              <ChartsProvider chartsTheme={chartsTheme}>
                <PluginRegistry pluginLoader={pluginLoader} defaultPluginKinds={{ TimeSeriesQuery: 'PrometheusTimeSeriesQuery' }}>
                  <ViewDashboard
                    dashboardResource={dashboard}
                    datasourceApi={datasourceApi}
                    isReadonly={true}
                    isVariableEnabled={true}
                    isDatasourceEnabled={false}
                    isEditing={false}
                  />
                </PluginRegistry>
              </ChartsProvider>
            </SnackbarProvider>
          </ThemeProvider>
        </QueryClientProvider>
      </QueryParamProvider>
    </BrowserRouter>
  );
}

createRoot(document.getElementById('root')).render(<App />);
