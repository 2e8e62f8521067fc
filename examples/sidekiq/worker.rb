# A Sidekiq job that allocates like a typical one: builds strings of mixed sizes, keeps a
# few of them for a while (a cache), and lets the rest go. Many threads doing this at
# once is the pattern behind glibc arena fragmentation in Sidekiq processes.
require "sidekiq"

class AllocatingJob
  include Sidekiq::Worker
  sidekiq_options retry: false

  CACHE = []
  LOCK = Mutex.new

  def perform(n)
    rows = Array.new(200) { |i| ("x" * (64 + (n * 31 + i * 97) % 4000)) << i.to_s }
    joined = rows.join(",")
    LOCK.synchronize do
      CACHE << joined[0, 2048]
      CACHE.shift if CACHE.size > 500
    end
    # Counted as it finishes: Sidekiq's own processed count is flushed only every few seconds.
    Sidekiq.redis { |r| r.incr("memtrial:done") }
    joined.bytesize
  end
end
