import json,glob,sys,os
pat=sys.argv[1]
print("| run | ledger | replicas | Checks/s | Check p50 / p99 (ms) | daemon CPU/req | daemon idle (cores) | daemon CPU/req above idle | Redis calls/req | Redis CPU/req | above bare floor | above daemons' idle | Redis ms/1k | Redis idle / bare (ms/s) | from leases |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for f in sorted(glob.glob(pat+'/results.json')):
    d=json.load(open(f)); p=d['plan']; r=d['runs'][0]
    rate=r['admitted']/r['window_s']
    idle=r.get('idle',{}).get('cpu_cores',0)
    marg=(r['cpu_cores']-idle)*1e6/rate
    L=r.get('ledger')
    name=os.path.basename(os.path.dirname(f))
    s=f"| {name} | {p.get('ledger','memory')} | {p.get('replicas',1)} | {rate:.0f} | {r['check_limited_p50_ms']:.2f} / {r['check_limited_p99_ms']:.2f} | {r['cpu_us_per_request']:.0f} us | {idle:.3f} | {marg:.0f} us |"
    if L:
        redis_us_s=L['redis_cpu_us_per_admitted']*rate
        aboveidle=(redis_us_s-L['redis_idle_cpu_ms_per_s']*1000)/rate
        s+=f" {L['all_calls_per_admitted']:.4f} | {L['redis_cpu_us_per_admitted']:.2f} us | {L['redis_cpu_us_per_admitted_above_bare']:.2f} us | {aboveidle:.2f} us | {L['redis_cpu_ms_per_1k_requests']:.2f} | {L['redis_idle_cpu_ms_per_s']:.2f} / {L['redis_bare_cpu_ms_per_s']:.2f} | {100*L['admitted_from_leases']:.1f}% |"
    else:
        s+=" - | - | - | - | - | - | - |"
    print(s)
