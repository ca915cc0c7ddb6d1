-- GET random keys: KEY_PREFIX + 0..KEYS-1 in namespace NS; GZIP=1 sends Accept-Encoding: gzip.
local token = os.getenv("TOKEN")
local keys = tonumber(os.getenv("KEYS") or "10000")
local prefix = os.getenv("KEY_PREFIX") or "key-"
local namespace = os.getenv("NS") or "bench"
local gzip = os.getenv("GZIP") == "1"
local counter = 0

function init(args)
  counter = counter + 1
  math.randomseed(os.time() * 1000 + counter + tonumber(tostring({}):sub(8), 16) % 100000)
end

function request()
  local headers = { ["Authorization"] = "Bearer " .. token }
  if gzip then headers["Accept-Encoding"] = "gzip" end
  return wrk.format("GET", "/v1/caches/" .. namespace .. "/entries/" .. prefix .. math.random(0, keys - 1), headers)
end
