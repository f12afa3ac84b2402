-- GET requests for bench/run.py: each request takes a random line of the file BENCH_PATHS (one
-- path with its query string per line); BENCH_API_KEY, when set, is sent as a bearer key.
-- Every answer outside 2xx is counted; done() prints one JSON line that run.py reads.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("tid", #threads)
end

function init(args)
  paths = {}
  for line in io.lines(os.getenv("BENCH_PATHS")) do
    if #line > 0 then paths[#paths + 1] = line end
  end
  if #paths == 0 then error("no paths in " .. os.getenv("BENCH_PATHS")) end
  local key = os.getenv("BENCH_API_KEY")
  headers = {}
  if key and #key > 0 then headers["Authorization"] = "Bearer " .. key end
  math.randomseed(os.time() * 97 + tid)
  bad = 0
  first_bad = ""
end

function request()
  return wrk.format("GET", paths[math.random(#paths)], headers)
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
