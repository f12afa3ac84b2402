-- POST requests for bench/run.py: the bodies are the lines of BENCH_BODIES, taken in turn, in
-- which every "@KEY@" becomes an idempotency key used once (run token, thread, counter), so
-- every request stores new receipts. BENCH_PATH is the route, BENCH_API_KEY the bearer key.
-- Counting and the result line are report.lua's, beside this file.

-- wrk loads a script by the path it was given, not from the script's folder: find report.lua
-- from this file's own path.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "") .. "report.lua")

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
