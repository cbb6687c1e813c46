-- /stats: this worker's counts as JSON: requests that reached /event,
-- events delivered (answered 200) and failed (answered 503). A request
-- whose client left while it waited still counts its delivery report: the
-- handler goes on, only its answer goes nowhere.
local site = require "_kafka"

return function(req, resp)
    resp:json(site.counts)
end
