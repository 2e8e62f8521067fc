# A small Rack app that allocates like a Rails action: builds records, renders JSON.
require "json"

ITEMS_CACHE = []

app = lambda do |env|
  case env["PATH_INFO"]
  when "/items"
    items = Array.new(200) { |i| { "id" => i, "name" => "item-#{i}" * 4, "tags" => %w[a b c].map { |t| t * (i % 7 + 1) } } }
    ITEMS_CACHE << items.sample(2) if ITEMS_CACHE.size < 5_000   # a little state that survives
    [200, { "content-type" => "application/json" }, [JSON.generate(items)]]
  else
    [200, { "content-type" => "text/plain" }, ["ok\n"]]
  end
end

run app
