-- PUT ~2 KB compressible JSON bodies under random keys (upsert: creates, then replaces).
local token = os.getenv("TOKEN")
local namespace = os.getenv("NS") or "bench"
local body

function init(args)
  math.randomseed(os.time() * 1000 + tonumber(tostring({}):sub(8), 16) % 100000)
  local items = {}
  for i = 1, 24 do
    items[#items + 1] = string.format('{"id":%d,"name":"item %d","score":%d,"tags":["alpha","beta"],"ok":true}',
                                      i, i, math.random(1, 1000))
  end
  body = "[" .. table.concat(items, ",") .. "]"
end

function request()
  return wrk.format("PUT", "/v1/caches/" .. namespace .. "/entries/up-" .. math.random(0, 99999),
                    { ["Authorization"] = "Bearer " .. token, ["Content-Type"] = "application/json" }, body)
end
