local mf = require "moonflow"

return function(req, resp)
    mf.sleep(tonumber(req.query.ms) or 500)
    resp:send("slow done")
end
