-- POST requests for bench/run.py: the bodies are the lines of BENCH_BODIES, taken in turn, in
-- which every "@KEY@" becomes an idempotency key used once (run token, thread, counter), so
-- every request stores new receipts. BENCH_PATH is the route, BENCH_API_KEY the bearer key.
-- Every answer outside 2xx is counted; done() prints one JSON line that run.py reads.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function init(args)
  bodies = {}
  for line in io.lines(os.getenv("BENCH_BODIES")) do
    if #line > 0 then bodies[#bodies + 1] = line end
  end
  if #bodies == 0 then error("no bodies in " .. os.getenv("BENCH_BODIES")) end
  path = os.getenv("BENCH_PATH")
  prefix = os.getenv("BENCH_RUN") .. "/t" .. tid .. "/"
  headers = {
    ["Authorization"] = "Bearer " .. os.getenv("BENCH_API_KEY"),
    ["Content-Type"] = "application/json",
  }
  turn = tid
  counter = 0
  bad = 0
  first_bad = ""
end

local function next_key()
  counter = counter + 1
  return prefix .. counter
end

function request()
  turn = turn % #bodies + 1
  local body = string.gsub(bodies[turn], "@KEY@", next_key)
  return wrk.format("POST", path, headers, body)
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    bad = bad + 1
    if first_bad == "" then first_bad = tostring(status) end
  end
end

function done(summary, latency, requests)
  local total, example = 0, ""
  for _, thread in ipairs(threads) do
    total = total + thread:get("bad")
    if example == "" then example = thread:get("first_bad") end
  end
  local errors = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests": %d, "duration_us": %d, "bytes": %d, "non2xx": %d, ' ..
    '"first_non2xx": "%s", "connect": %d, "read": %d, "write": %d, "timeout": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "mean_us": %.1f, "max_us": %d}\n',
    summary.requests, summary.duration, summary.bytes, total, example, errors.connect,
    errors.read, errors.write, errors.timeout, latency:percentile(50), latency:percentile(99),
    latency.mean, latency.max))
end
