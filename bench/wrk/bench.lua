-- wrk script for bench/run.sh. Configured by environment variables (read in every wrk
-- thread's Lua state):
--   BENCH_KIND     trivial | caps | replay | create
--                  trivial: GET /v1/this-route-does-not-exist (a 404 through the whole
--                  middleware stack, no I/O)
--   BENCH_API_KEY  the platform key (x-api-key)
--   BENCH_BODY     JSON body for POST /v1/auth/keys; in `create` the literal
--                  __PRID__ is replaced by a fresh UUID on every request
--   BENCH_IDEM_KEY Idempotency-Key for `replay` (the same on every request)
--   BENCH_SEED     a number mixed into each thread's random seed (`create`)
--   BENCH_EXPECT   which statuses count as success: "2xx" (default), or one exact code
--                  ("404" for trivial, "200" for replay); anything else is an error
--   BENCH_CHECK_EVERY  if > 0 (replay): every Nth response of each thread, the first
--                  included, must contain "idempotency_replayed":true in its body
-- done() prints one machine-readable line starting with "BENCH ".

local kind = os.getenv("BENCH_KIND") or "caps"
local api_key = os.getenv("BENCH_API_KEY") or ""
local body = os.getenv("BENCH_BODY") or ""

wrk.headers["x-api-key"] = api_key
if kind == "trivial" then
  -- No route matches: the request id, tracing span, access log and envelope rendering of
  -- a 404 NOT_FOUND run, no authentication and no I/O. The same x-api-key header is sent
  -- so the request differs from `caps` only in its path.
  wrk.method = "GET"
  wrk.path = "/v1/this-route-does-not-exist"
elseif kind == "caps" then
  wrk.method = "GET"
  wrk.path = "/v1/capabilities"
elseif kind == "replay" then
  wrk.method = "POST"
  wrk.path = "/v1/auth/keys"
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
  wrk.headers["Idempotency-Key"] = os.getenv("BENCH_IDEM_KEY") or ""
elseif kind == "create" then
  local function uuid4()
    return (string.gsub("xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx", "[xy]", function(c)
      local v = (c == "x") and math.random(0, 15) or math.random(8, 11)
      return string.format("%x", v)
    end))
  end
  local headers = { ["x-api-key"] = api_key, ["Content-Type"] = "application/json" }
  -- Every request is a brand-new create: new Idempotency-Key, new partner_request_id.
  request = function()
    headers["Idempotency-Key"] = uuid4()
    local b = string.gsub(body, "__PRID__", uuid4())
    return wrk.format("POST", "/v1/auth/keys", headers, b)
  end
else
  error("BENCH_KIND must be trivial, caps, replay or create")
end

local expect = os.getenv("BENCH_EXPECT") or "2xx"
local expect_code = tonumber(expect) -- nil for "2xx"
local check_every = tonumber(os.getenv("BENCH_CHECK_EVERY") or "0") or 0
local REPLAYED = '"idempotency_replayed":true'

-- Per-thread tally of unexpected status codes and of the sampled body checks, collected
-- in done().
local threads = {}
local next_id = 0
function setup(thread)
  next_id = next_id + 1
  thread:set("tid", next_id)
  table.insert(threads, thread)
end

function init(args)
  local seed = tonumber(os.getenv("BENCH_SEED") or "0") or 0
  math.randomseed(os.time() * 1000 + seed * 7 + (tid or 0) * 7919)
  for _ = 1, 10 do math.random() end
  non2xx = {}
  seen, checked, flag_missing = 0, 0, 0
end

function response(status, headers, body)
  local ok
  if expect_code then ok = (status == expect_code) else ok = (status >= 200 and status <= 299) end
  if not ok then
    non2xx[status] = (non2xx[status] or 0) + 1
  end
  if check_every > 0 then
    if seen % check_every == 0 then
      checked = checked + 1
      if not (body and string.find(body, REPLAYED, 1, true)) then
        flag_missing = flag_missing + 1
      end
    end
    seen = seen + 1
  end
end

function done(summary, latency, requests)
  local statuses, total_non2xx = {}, 0
  local agg = {}
  local n_checked, n_missing = 0, 0
  for _, t in ipairs(threads) do
    n_checked = n_checked + (t:get("checked") or 0)
    n_missing = n_missing + (t:get("flag_missing") or 0)
    local tally = t:get("non2xx") or {}
    for code, n in pairs(tally) do
      agg[code] = (agg[code] or 0) + n
      total_non2xx = total_non2xx + n
    end
  end
  for code, n in pairs(agg) do table.insert(statuses, tostring(code) .. ":" .. tostring(n)) end
  table.sort(statuses)
  local e = summary.errors
  local sock = e.connect + e.read + e.write + e.timeout
  local secs = summary.duration / 1e6
  io.write(string.format(
    "BENCH requests=%d duration_s=%.3f rps=%.1f p50_ms=%.2f p99_ms=%.2f max_ms=%.2f non2xx=%d socket_errors=%d statuses=%s checked=%d flag_missing=%d\n",
    summary.requests, secs, summary.requests / secs,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
    total_non2xx, sock, (#statuses > 0) and table.concat(statuses, ",") or "-",
    n_checked, n_missing))
end
