-- /stats: this worker's counts as JSON: requests that reached /event,
-- events delivered (answered 200) and failed (answered 503). A request
-- whose client left while it waited counts in requests only (its message
-- may still be delivered: a produce cannot be recalled).
local site = require "_kafka"

return function(req, resp)
    resp:json(site.counts)
end
