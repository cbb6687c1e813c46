-- /json?name=x : the request, echoed as JSON.
local mf = require "moonflow"

return function(req, resp)
    resp:json {
        method = req.method,
        path = req.path,
        query = req.query,
        user_agent = req.headers["User-Agent"],
        time = mf.now(),
    }
end
