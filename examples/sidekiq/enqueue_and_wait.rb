# memtrial's --driver for the Sidekiq example: waits until the worker is up, enqueues N
# AllocatingJob jobs, polls until Sidekiq has processed them all, and reports how fast
# in memtrial's figure format. Exits non-zero (with why on stderr) if they never drain.
#
#   ruby enqueue_and_wait.rb N [TIMEOUT_SECONDS]    (REDIS_URL names the redis)
require "sidekiq"
require "sidekiq/api"
require_relative "worker"

n = Integer(ARGV.fetch(0, "2000"))
limit = Float(ARGV.fetch(1, "50"))
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
elapsed = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0 }

# Start-up: the worker has registered itself in redis.
until Sidekiq::ProcessSet.new.size > 0
  if elapsed.call > limit
    warn "no Sidekiq process registered in redis within #{limit} s"
    exit 2
  end
  sleep 0.05
end
puts "memtrial-ready"
$stdout.flush

done = -> { Sidekiq.redis { |r| r.get("memtrial:done") }.to_i }
before = done.call
start = Process.clock_gettime(Process::CLOCK_MONOTONIC)
(0...n).each_slice(1000) do |slice|
  Sidekiq::Client.push_bulk("class" => AllocatingJob, "args" => slice.map { |i| [i] })
end
loop do
  finished = done.call - before
  break if finished >= n
  if elapsed.call > limit
    warn "only #{finished} of #{n} jobs processed within #{limit} s"
    exit 1
  end
  sleep 0.01
end
seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - start
puts "memtrial-figure jobs #{n} jobs"
puts format("memtrial-figure jobs_per_second %.1f jobs/s", n / seconds)
puts format("memtrial-figure drain_seconds %.3f s", seconds)
