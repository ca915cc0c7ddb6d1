-- POST one body (BODY_FILE) to the URL's path, with HEADERS ("Name: value" lines, `|`-separated):
-- the same request each time, as a repeated model call is.
local body
local headers = { ["Content-Type"] = "application/json" }

function init(args)
  local file = assert(io.open(os.getenv("BODY_FILE"), "rb"))
  body = file:read("*a")
  file:close()
  for pair in string.gmatch(os.getenv("HEADERS") or "", "[^|]+") do
    local name, value = string.match(pair, "^%s*([^:]+):%s*(.*)$")
    if name then headers[name] = value end
  end
end

function request()
  return wrk.format("POST", nil, headers, body)
end
