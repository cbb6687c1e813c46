local mf = require "moonflow"

return function(req, resp)
    resp:json(mf.debug.counts())
end
