-- 90% lookups, 10% upserts; keys Zipf-distributed (s = 1) over KEYS entries; every other
-- request accepts gzip (half the clients' behaviour, mixed on each connection).
local token = os.getenv("TOKEN")
local keys = tonumber(os.getenv("KEYS") or "100000")
local namespace = os.getenv("NS") or "bench"
local cdf, body, counter = {}, nil, 0

function init(args)
  math.randomseed(os.time() * 1000 + tonumber(tostring({}):sub(8), 16) % 100000)
  local total = 0
  for rank = 1, keys do total = total + 1 / rank; cdf[rank] = total end
  for rank = 1, keys do cdf[rank] = cdf[rank] / total end
  local items = {}
  for i = 1, 24 do
    items[#items + 1] = string.format('{"id":%d,"name":"item %d","tags":["alpha","beta"],"ok":true}', i, i)
  end
  body = "[" .. table.concat(items, ",") .. "]"
end

local function zipf()
  local u, low, high = math.random(), 1, keys
  while low < high do
    local middle = math.floor((low + high) / 2)
    if cdf[middle] < u then low = middle + 1 else high = middle end
  end
  return low - 1
end

function request()
  counter = counter + 1
  local key = "/v1/caches/" .. namespace .. "/entries/key-" .. zipf()
  local headers = { ["Authorization"] = "Bearer " .. token }
  if counter % 10 == 0 then
    headers["Content-Type"] = "application/json"
    return wrk.format("PUT", key, headers, body)
  end
  if counter % 2 == 1 then headers["Accept-Encoding"] = "gzip" end
  return wrk.format("GET", key, headers)
end
